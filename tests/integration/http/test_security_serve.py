"""A real `gpulse serve` behind TLS, mutual TLS and bcrypt basic auth.

Certificates are made per test run (tests/tlsutil.py); clients are requests, the
stdlib ssl module and curl. The web config files are checked by promtool too.
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import threading
import time

import pytest
import requests

from conftest import require_binary
from liveserver import Live
from tlsutil import CA, bcrypt_hash, write_web_config
from tlsutil import start_tls

PW = "correct horse"
METRIC = "gpulse_gpu_busy_seconds_total"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CA(d)
    stranger = CA(d, "stranger CA")
    return {"dir": d, "ca": ca, "server": ca.issue("server", server=True), "client": ca.issue("client", server=False),
            "stranger": stranger.issue("intruder", server=False)}


def promtool_check(path) -> None:
    p = subprocess.run([require_binary("promtool"), "check", "web-config", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_binary("curl"), "-sS", "--max-time", "10", *args],
                          capture_output=True, text=True, timeout=20)


def test_tls_basic_auth_and_headers(gpulse_proc, pki):
    web = write_web_config(pki["dir"] / "web-auth.yml", {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "http_server_config": {"headers": {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff",
                                           "Strict-Transport-Security": "max-age=31536000"}},
        "basic_auth_users": {"prometheus": bcrypt_hash(PW), "other": bcrypt_hash("other password")},
    })
    promtool_check(web)
    ca = str(pki["ca"].path)
    g = start_tls(gpulse_proc, web, ca)
    url = g.url

    # the exporter and the live page need credentials; every failure is 401 + a challenge
    for path in ("/metrics", "/"):
        for auth in (None, ("prometheus", "wrong"), ("nobody", PW), ("other", PW), ("prometheus", "")):
            r = requests.get(url + path, verify=ca, auth=auth, timeout=10)
            assert r.status_code == 401, (path, auth, r.status_code)
            assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
            assert METRIC not in r.text
    for bad in ("Basic !!!not-base64", "Bearer abc", "Basic " + "QQ==", "basic", "Basic " + "a" * 5000):
        r = requests.get(url + "/metrics", verify=ca, headers={"Authorization": bad}, timeout=10)
        assert r.status_code == 401, bad

    r = requests.get(url + "/metrics", verify=ca, auth=("prometheus", PW), timeout=10)
    assert r.status_code == 200 and METRIC in r.text
    assert requests.get(url + "/", verify=ca, auth=("prometheus", PW), timeout=10).status_code == 200
    # the configured headers go on every answer, 401s included
    for resp in (r, requests.get(url + "/metrics", verify=ca, timeout=10)):
        assert resp.headers["X-Frame-Options"] == "deny"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert "Python" not in resp.headers["Server"]

    # health endpoints stay open for kubelet probes (--web.healthz-public, the default)
    assert requests.get(url + "/healthz", verify=ca, timeout=10).text == "ok\n"
    assert requests.get(url + "/readyz", verify=ca, timeout=10).status_code == 200

    # plain HTTP on the TLS port: refused with a reason, never served
    r = requests.get(f"http://127.0.0.1:{g.port}/metrics", auth=("prometheus", PW), timeout=10)
    assert r.status_code == 400 and "HTTP request to an HTTPS server" in r.text and METRIC not in r.text
    # a client that does not trust the certificate never gets to send credentials
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url + "/metrics", auth=("prometheus", PW), timeout=10)

    # curl, a second client implementation (OpenSSL through libcurl)
    p = curl("--cacert", ca, "-u", f"prometheus:{PW}", url + "/metrics")
    assert p.returncode == 0 and METRIC in p.stdout, p.stderr
    p = curl("--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}", url + "/metrics")
    assert p.stdout == "401"
    p = curl("-o", "/dev/null", url + "/metrics")            # no CA: curl refuses the certificate
    assert p.returncode == 60, (p.returncode, p.stderr)


def test_mutual_tls_tls13_and_private_health(gpulse_proc, pki):
    web = write_web_config(pki["dir"] / "web-mtls.yml", {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert",
                              "client_ca_file": pki["ca"].path.name, "min_version": "TLS13"},
        "basic_auth_users": {"prometheus": bcrypt_hash(PW)},
    })
    promtool_check(web)
    ca = str(pki["ca"].path)
    client = (str(pki["client"].cert), str(pki["client"].key))
    intruder = (str(pki["stranger"].cert), str(pki["stranger"].key))
    g = start_tls(gpulse_proc, web, ca, "--no-web.healthz-public", client=client, auth=("prometheus", PW))
    url = g.url

    r = requests.get(url + "/metrics", verify=ca, cert=client, auth=("prometheus", PW), timeout=10)
    assert r.status_code == 200 and METRIC in r.text
    # certificate and password are both required
    assert requests.get(url + "/metrics", verify=ca, cert=client, timeout=10).status_code == 401
    assert requests.get(url + "/healthz", verify=ca, cert=client, timeout=10).status_code == 401
    for cert in (None, intruder):
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url + "/metrics", verify=ca, cert=cert, auth=("prometheus", PW), timeout=10)

    # min_version TLS13: a TLS 1.2 client is turned away during the handshake
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(*client)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", g.port), timeout=10) as s:
        with pytest.raises(ssl.SSLError):
            ctx.wrap_socket(s, server_hostname="localhost")
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", g.port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            assert t.version() == "TLSv1.3"

    p = curl("--cacert", ca, "--cert", client[0], "--key", client[1], "-u", f"prometheus:{PW}", url + "/metrics")
    assert p.returncode == 0 and METRIC in p.stdout, p.stderr
    p = curl("--cacert", ca, "--cert", client[0], "--key", client[1], "--tls-max", "1.2", url + "/metrics")
    assert p.returncode != 0
    p = curl("--cacert", ca, "-u", f"prometheus:{PW}", url + "/metrics")    # no client certificate
    assert p.returncode != 0 and METRIC not in p.stdout


def _server_cert_der(port: int, ca: str) -> bytes:
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.getpeercert(binary_form=True)


def _der(pem_path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_path.read_text())


def test_sighup_reload_rotates_cert_and_users_without_dropping_scrapes(gpulse_proc, pki):
    ca_path = str(pki["ca"].path)
    first, second = pki["ca"].issue("server-a", server=True), pki["ca"].issue("server-b", server=True)
    path = pki["dir"] / "web-reload.yml"

    def config(cert, users):
        write_web_config(path, {"tls_server_config": {"cert_file": cert.cert.name, "key_file": cert.key.name},
                                "basic_auth_users": users})

    alice = bcrypt_hash(PW)
    config(first, {"alice": alice})
    g = start_tls(gpulse_proc, path, ca_path)
    assert _server_cert_der(g.port, ca_path) == _der(first.cert)

    # scrapers that must never notice a reload: one keeps its connection, one reconnects each time
    results: list = []
    stop = threading.Event()

    def scrape(keep_alive: bool) -> None:
        s = requests.Session() if keep_alive else None
        while not stop.is_set():
            try:
                r = (s or requests).get(g.url + "/metrics", verify=ca_path, auth=("alice", PW), timeout=10)
                results.append(r.status_code)
            except requests.RequestException as e:
                results.append(repr(e))

    threads = [threading.Thread(target=scrape, args=(k,)) for k in (True, False)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        config(second, {"alice": alice, "bob": bcrypt_hash("bob pw")})
        g.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while requests.get(g.url + "/metrics", verify=ca_path, auth=("bob", "bob pw"), timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "bob never got in after SIGHUP"
            time.sleep(0.1)
        assert _server_cert_der(g.port, ca_path) == _der(second.cert)

        # a broken file on SIGHUP: logged, and the running config stays
        path.write_text("basic_auth_users:\n  alice: not-a-hash\n")
        g.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert requests.get(g.url + "/metrics", verify=ca_path, auth=("bob", "bob pw"), timeout=10).status_code == 200
        # turning TLS off needs a restart: refused the same way
        write_web_config(path, {"basic_auth_users": {"alice": alice}})
        g.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert _server_cert_der(g.port, ca_path) == _der(second.cert)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(15)

    assert len(results) > 20
    assert all(x == 200 for x in results), [x for x in results if x != 200][:5]
    # removing a user takes effect on the next request
    config(second, {"bob": bcrypt_hash("bob pw")})
    g.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while requests.get(g.url + "/metrics", verify=ca_path, auth=("alice", PW), timeout=10).status_code != 401:
        assert time.monotonic() < deadline, "alice still accepted after being removed"
        time.sleep(0.1)
    out = g.output()
    assert "SIGHUP: web config" in out and "reloaded" in out
    assert "basic_auth_users.alice: not a bcrypt hash" in out and "keeping the previous web config" in out
    assert "turning TLS on or off needs a restart" in out
    assert "Traceback" not in out


def test_sighup_without_web_config_is_harmless(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "1")
    os.kill(g.proc.pid, signal.SIGHUP)
    time.sleep(0.3)
    assert requests.get(g.url + "/healthz", timeout=5).status_code == 200
    assert "no --web.config.file to reload" in g.output()


def test_sighup_that_would_open_the_door_is_refused_and_logged(tmp_path, pki):
    """A reload removing every user (/metrics would answer anyone) or no longer
    requiring client certificates is refused at ERROR, and the running config stays;
    an edit to --config is named in a warning, not silently ignored."""
    import logging

    path = tmp_path / "web.yml"
    write_web_config(path, {"basic_auth_users": {"alice": bcrypt_hash(PW)}})
    settings = tmp_path / "gpulse.yml"
    settings.write_text("sample_interval: 100ms\n")
    with Live(log_level=logging.WARNING, config_file=str(settings), web__config_file=str(path)) as live:
        assert requests.get(live.url + "/metrics", timeout=10).status_code == 401
        write_web_config(path, {"basic_auth_users": {}})
        live.rt.reload()
        assert requests.get(live.url + "/metrics", timeout=10).status_code == 401
        assert requests.get(live.url + "/metrics", auth=("alice", PW), timeout=10).status_code == 200
        errors = [r.getMessage() for r in live.log.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "no basic_auth_users" in errors[0] and "keeping the previous" in errors[0], errors
        assert not any("has changed since start" in m for m in live.log.messages())

        settings.write_text("sample_interval: 1s\n")
        live.rt.reload()
        assert any(f"{settings} has changed since start and is not reloaded" in m for m in live.log.messages())

    ca = str(pki["ca"].path)
    client = (str(pki["client"].cert), str(pki["client"].key))
    tls = {"cert_file": str(pki["server"].cert), "key_file": str(pki["server"].key)}
    write_web_config(path, {"tls_server_config": {**tls, "client_auth_type": "RequireAndVerifyClientCert",
                                                  "client_ca_file": ca}})
    with Live(web__config_file=str(path)) as live:
        url = f"https://127.0.0.1:{live.port}/metrics"
        assert requests.get(url, verify=ca, cert=client, timeout=10).status_code == 200
        write_web_config(path, {"tls_server_config": tls})
        live.rt.reload()
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url, verify=ca, timeout=10)
        assert any("no longer requires client certificates" in m for m in live.log.messages())


def test_probe_port_answers_the_kubelet_under_mutual_tls(gpulse_proc, pki):
    """With RequireAndVerifyClientCert the kubelet's HTTPS probe (no client
    certificate) fails the handshake, so the pod would never be ready. The probe
    port answers /healthz and /readyz in plain HTTP, and nothing else."""
    web = write_web_config(pki["dir"] / "web-probes.yml", {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert",
                              "client_ca_file": pki["ca"].path.name},
        "basic_auth_users": {"prometheus": bcrypt_hash(PW)},
    })
    ca = str(pki["ca"].path)
    client = (str(pki["client"].cert), str(pki["client"].key))
    g = start_tls(gpulse_proc, web, ca, "--web.probe-listen-address", "127.0.0.1:0",
                  client=client, auth=("prometheus", PW))
    probe = g.probe_port
    # what the kubelet's httpGet probe does on the main port: no certificate, refused
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(g.url + "/healthz", verify=ca, timeout=10)
    plain = f"http://127.0.0.1:{probe}"
    assert requests.get(plain + "/healthz", timeout=10).text == "ok\n"
    assert requests.get(plain + "/readyz", timeout=10).status_code == 200
    for path in ("/metrics", "/", "/api/heatmap"):
        r = requests.get(plain + path, auth=("prometheus", PW), timeout=10)
        assert r.status_code == 404 and "gpulse_" not in r.text, (path, r.status_code)
    r = requests.get(g.url + "/metrics", verify=ca, cert=client, auth=("prometheus", PW), timeout=10)
    assert r.status_code == 200 and METRIC in r.text
    assert f"probes (/healthz, /readyz only) on plain HTTP port {probe}" in g.output()


def test_every_answer_says_nosniff_once(tmp_path):
    """/metrics is text/plain carrying names others wrote; a browser must not sniff
    it (or any other answer) as HTML. A web config that sets the header too gets it
    once, not twice."""
    import http.client
    with Live() as live:
        for path in ("/metrics", "/", "/healthz", "/nothing-here"):
            r = requests.get(live.url + path, timeout=10)
            assert r.raw.headers.getlist("X-Content-Type-Options") == ["nosniff"], (path, r.headers)
        # a head refused before Tornado parses it (HTTP/0.9-style line)
        conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
        conn.putrequest("GET", "/" + "x" * 9000)
        conn.endheaders()
        refused = conn.getresponse()
        assert refused.status == 414 and refused.getheader("X-Content-Type-Options") == "nosniff"
        conn.close()
    path = write_web_config(tmp_path / "web.yml", {"http_server_config": {"headers": {
        "X-Content-Type-Options": "nosniff"}}})
    with Live(web__config_file=str(path)) as live:
        r = requests.get(live.url + "/metrics", timeout=10)
        assert r.raw.headers.getlist("X-Content-Type-Options") == ["nosniff"]
