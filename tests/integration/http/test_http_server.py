"""The HTTP server as a `gpulse serve` process sees it from the network: request
smuggling forms, an HTTP/0.9 line, floods of wrong passwords and of idle
connections, gzip; and the bcrypt decoy for unknown users.

Floods are judged by how many good requests are answered (>= 95 %), never by how
fast: every client timeout is generous, so a loaded machine slows the test down
but does not fail it.
"""
from __future__ import annotations

import gzip
import socket
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import require_binary
from fuzzing import exchange
from tlsutil import bcrypt_hash, write_web_config
from tlsutil import start_tls

SMUGGLED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
PW = "correct horse"


def raw(port: int, data: bytes, wait: float) -> bytes:
    """Send without half-closing, as a real client waiting for its answer does."""
    return exchange(port, data, wait=wait, half_close=False)


@pytest.mark.parametrize("framing", [
    b"Content-Length: 0\r\nContent-Length: %d\r\n" % len(SMUGGLED),     # duplicated, 0 then the body
    b"X-No-Colon\r\nContent-Length: %d\r\n" % len(SMUGGLED),              # a line without a colon first
    b"Content-Length : %d\r\n" % len(SMUGGLED),                           # space before the colon
], ids=["duplicate-length", "no-colon", "space-before-colon"])
def test_smuggling_forms_get_one_answer(gpulse_proc, framing):
    # --web.timeout 60s: a server that kept the connection open for a second
    # request would hold it far past the client's wait
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--web.timeout", "60s")
    resp = raw(g.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + SMUGGLED, wait=20)
    assert resp.count(b"HTTP/1.1 ") == 1, resp[:400]
    code = int(resp.split()[1])
    assert code == 400 or (code == 200 and b"Connection: close" in resp), resp[:400]
    assert b"gpulse_" not in resp            # the body was never served as a /metrics request


def test_http09_line_is_answered_at_once(gpulse_proc):
    """`GET /metrics` and nothing else, as an HTTP/0.9 client sends it: an error,
    not a wait for headers that never come (here up to the 60 s head deadline,
    far past the client's 20 s)."""
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--web.timeout", "60s")
    resp = raw(g.port, b"GET /metrics\r\n", wait=20)
    assert resp.startswith(b"HTTP/1.1 400 "), resp[:200]
    assert b"gpulse_" not in resp


def test_http09_line_inside_tls_is_answered_at_once(gpulse_proc, tmp_path):
    import ssl

    from tlsutil import CA

    ca = CA(tmp_path)
    srv = ca.issue("server", server=True)
    web = write_web_config(tmp_path / "web.yml", {"tls_server_config": {"cert_file": srv.cert.name,
                                                                        "key_file": srv.key.name}})
    g = start_tls(gpulse_proc, web, ca.path, "--web.timeout", "60s")
    ctx = ssl.create_default_context(cafile=str(ca.path))
    with socket.create_connection(("127.0.0.1", g.port), timeout=20) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            t.sendall(b"GET /metrics\r\n")
            assert t.recv(200).startswith(b"HTTP/1.1 400 ")


def _answered(url: str, n: int, **kw) -> int:
    ok = 0
    for _ in range(n):
        try:
            ok += requests.get(url, timeout=20, **kw).status_code == 200
        except requests.RequestException:
            pass
        time.sleep(0.05)
    return ok


def _probe_and_scrape(url: str, n: int, auth=None) -> tuple[int, int]:
    """n fresh-connection scrapes and n /healthz probes, as Prometheus and the kubelet
    send them: each its own client at the same time, a new connection each (probes
    never keep one alive)."""
    with ThreadPoolExecutor(2) as pool:
        scrapes = pool.submit(_answered, url + "/metrics", n, auth=auth)
        probes = pool.submit(_answered, url + "/healthz", n)
        return scrapes.result(), probes.result()


FLOOD_REQUESTS = 10


def test_wrong_password_flood_leaves_scrapes_and_probes_answered(gpulse_proc, tmp_path):
    """66 connections sending wrong passwords as fast as they are answered: bcrypt
    checks are capped on their own threads and never take a request slot, a
    remembered login needs no bcrypt, and probes are answered before auth."""
    web = write_web_config(tmp_path / "web.yml", {"basic_auth_users": {"prometheus": bcrypt_hash(PW, 10)}})
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--web.config.file", str(web))
    good = ("prometheus", PW)
    assert requests.get(g.url + "/metrics", auth=good, timeout=20).status_code == 200   # remembered from now on
    stop = threading.Event()
    seen: list[int] = []

    def attacker() -> None:
        s = requests.Session()
        while not stop.is_set():
            try:
                seen.append(s.get(g.url + "/metrics", auth=("prometheus", "wrong"), timeout=20).status_code)
            except requests.RequestException:
                pass

    attackers = [threading.Thread(target=attacker, daemon=True) for _ in range(66)]
    for t in attackers:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 66 and time.monotonic() < deadline:     # the flood is on
            time.sleep(0.05)
        # ten of each under the flood, which costs both cores while it lasts (thirty of
        # each took 11 s and 13 s of CPU)
        scrapes, probes = _probe_and_scrape(g.url, FLOOD_REQUESTS, auth=good)
    finally:
        stop.set()
        for t in attackers:
            t.join(30)
    assert set(seen) <= {401, 503} and 401 in seen, set(seen)
    assert scrapes >= FLOOD_REQUESTS - 1 and probes >= FLOOD_REQUESTS - 1, (scrapes, probes)


@pytest.mark.parametrize("soft_fd_limit", [None, 256], ids=["default", "soft-limit-256"])
def test_idle_connection_flood_leaves_scrapes_and_probes_answered(gpulse_proc, soft_fd_limit):
    """1,100 connections that never send a byte, more than the connection cap: the
    longest idle is evicted for each new connection, so scrapes and probes get in.
    With a low soft descriptor limit inherited (as in many containers) the server
    raises it to the hard limit first, so accept() never runs out."""
    import resource

    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_fd_limit is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_fd_limit, saved[1]))
    try:
        g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--web.timeout", "120s")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, saved)
    idle = []
    try:
        for _ in range(1100):
            idle.append(socket.create_connection(("127.0.0.1", g.port), timeout=20))
        scrapes, probes = _probe_and_scrape(g.url, 30)
        evicted = 0
        for s in idle[:200]:          # the oldest were evicted: the server closed them
            s.settimeout(0.0)
            try:
                evicted += s.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                evicted += 1
    finally:
        for s in idle:
            s.close()
    assert scrapes >= 29 and probes >= 29, (scrapes, probes)
    assert evicted > 0


@pytest.mark.parametrize("accept", ["", "application/openmetrics-text; version=1.0.0"], ids=["text", "openmetrics"])
def test_gzip_when_asked(gpulse_proc, tmp_path, accept):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "4")
    headers = {"Accept": accept} if accept else {}
    plain = requests.get(g.url + "/metrics", headers={**headers, "Accept-Encoding": "identity"}, timeout=10)
    assert "Content-Encoding" not in plain.headers
    r = requests.get(g.url + "/metrics", headers={**headers, "Accept-Encoding": "gzip"}, timeout=10, stream=True)
    assert r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding"
    packed = r.raw.read(decode_content=False)
    assert int(r.headers["Content-Length"]) == len(packed) < len(plain.content) / 3
    body = gzip.decompress(packed)            # two gzip members: the cached snapshot part, the live part
    assert body.count(b"# TYPE gpulse_gpu_busy_seconds") == 1 and b"\ngpulse_gpu_busy_seconds_total{" in body
    assert r.headers["Content-Type"] == plain.headers["Content-Type"]
    if accept:
        assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1
    else:
        path = tmp_path / "metrics.txt"
        path.write_bytes(body)
        p = subprocess.run([require_binary("promtool"), "check", "metrics"], stdin=path.open("rb"),
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    q0 = requests.get(g.url + "/metrics", headers={"Accept-Encoding": "gzip;q=0"}, timeout=10, stream=True)
    assert "Content-Encoding" not in q0.headers


def test_gzip_body_is_compressed_once_per_snapshot():
    from gpulse.collector import Exposition
    from testing.config import test_config
    from gpulse.drive import run_offline
    from gpulse.sources import make_source

    cfg = test_config(source="sim", sim__gpus=2)
    snaps = [snap for _, snap in run_offline(make_source(cfg), cfg, until=3)]
    current = {"snap": snaps[-1]}
    exp = Exposition("n", lambda: current["snap"], lambda: {"stale": False, "seconds_since_success": 0.1})
    a, b = exp._snapshot_body(snaps[-1], False, True), exp._snapshot_body(snaps[-1], False, True)
    assert a is b                                                   # cached, not recompressed
    assert gzip.decompress(a) == exp._snapshot_body(snaps[-1], False, False)
    current["snap"] = snaps[-2]
    assert gzip.decompress(exp.render(False, gzip=True)).startswith(exp._snapshot_body(snaps[-2], False, False))


def test_unknown_user_costs_what_the_costliest_user_costs():
    """Users of cost 4 and 12: an unknown user is checked against the cost-12 hash,
    so it takes as long as a real cost-12 user (not the ~1 ms of the cost-4 one)."""
    from gpulse.http.basicauth import DENIED, BasicAuth, cost

    users = {"fast": bcrypt_hash("a", 4).encode(), "admin": bcrypt_hash("b", 12).encode()}
    auth = BasicAuth(users)
    assert cost(auth._decoy) == 12

    def seconds(user: str) -> float:
        import base64
        header = "Basic " + base64.b64encode(f"{user}:wrong".encode()).decode()
        t0 = time.perf_counter()
        assert auth.verify(header) == DENIED
        return time.perf_counter() - t0

    unknown = statistics.median(seconds("nobody") for _ in range(3))
    admin = statistics.median(seconds("admin") for _ in range(3))
    assert 0.1 < unknown / admin < 10, (unknown, admin)


def test_every_check_does_the_bcrypt_work_of_the_costliest_hash():
    """Users of cost 4 and 10: without padding the cost-4 user answers in ~2 ms and
    an unknown name in ~60 ms, which tells the names apart. Counted in bcrypt rounds
    (2^cost per check) through the real library, so the verdict needs no clock."""
    import base64

    from gpulse.http.basicauth import DENIED, OK, BasicAuth, cost

    users = {"fast": bcrypt_hash("a", 4).encode(), "admin": bcrypt_hash("b", 10).encode()}
    auth = BasicAuth(users)
    real = auth._bcrypt
    rounds: list[int] = []

    class Counting:
        @staticmethod
        def checkpw(password: bytes, hashed: bytes) -> bool:
            rounds.append(2 ** cost(hashed))
            return real.checkpw(password, hashed)

    auth._bcrypt = Counting

    def work(user: str, password: str, verdict: str) -> int:
        rounds.clear()
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        assert auth.verify(header) == verdict
        return sum(rounds)

    done = {(u, p): work(u, p, v) for u, p, v in (
        ("nobody", "x", DENIED), ("fast", "wrong", DENIED), ("fast", "a", OK),
        ("admin", "wrong", DENIED), ("admin", "b", OK))}
    assert set(done.values()) == {2 ** 10}, done
