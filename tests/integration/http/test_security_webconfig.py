"""The web config file: gpulse and `promtool check web-config` agree on it.

Every file gpulse accepts must pass promtool (one file for all exporters of a
node); every mistake is one line naming the key. A property test throws
generated files at both and checks the one direction that matters: gpulse never
accepts what promtool rejects.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import require_binary
from gpulse.http.webconfig import WebConfigError, load_web_config
from tlsutil import CA, bcrypt_hash


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CA(d)
    return {"dir": d, "ca": ca, "server": ca.issue("server", server=True), "hash": bcrypt_hash("s3cret")}


def promtool_ok(path: Path) -> tuple[bool, str]:
    p = subprocess.run([require_binary("promtool"), "check", "web-config", str(path)],
                       capture_output=True, text=True, timeout=30)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def write(pki, name: str, text: str) -> Path:
    path = pki["dir"] / name
    for k, v in (("{cert}", pki["server"].cert.name), ("{key}", pki["server"].key.name),
                 ("{ca}", pki["ca"].path.name), ("{hash}", pki["hash"])):
        text = text.replace(k, v)
    path.write_text(text)
    return path


GOOD = {
    "empty": "",
    "tls": "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n",
    "mtls": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
             "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n"
             "  min_version: TLS13\n  max_version: TLS13\n"),
    "everything": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                   "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {ca}\n"
                   "  min_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                   " TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n"
                   "  prefer_server_cipher_suites: false\n  curve_preferences: [X25519, CurveP256]\n"
                   "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n"
                   "    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n"
                   "    Content-Security-Policy: \"default-src 'self'\"\n    X-XSS-Protection: \"1; mode=block\"\n"
                   "basic_auth_users:\n  prometheus: {hash}\n  \"alice smith\": {hash}\n"),
    "auth only": "basic_auth_users:\n  prometheus: {hash}\n",
}


@pytest.mark.parametrize("name", GOOD)
def test_good_files_load_and_pass_promtool(pki, name):
    path = write(pki, f"good-{name.replace(' ', '-')}.yml", GOOD[name])
    web = load_web_config(str(path))
    ok, out = promtool_ok(path)
    assert ok, out
    if "tls_server_config" in GOOD[name]:
        assert web.context is not None and web.tls.cert_file == str(pki["server"].cert)   # relative to the file
    else:
        assert web.context is None
    if "basic_auth_users" in GOOD[name]:
        assert web.auth_required


# (file text, words the one-line error must contain, whether promtool rejects it too)
BAD = [
    ("foo: 1\n", ["foo", "unknown key"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_allowed_sans: [x]\n",
     ["tls_server_config.client_allowed_sans", "unknown key"], True),
    ("tls_server_config:\n  cert_file: {cert}\n", ["tls_server_config.key_file", "required"], True),
    ("tls_server_config:\n  key_file: {key}\n", ["tls_server_config.cert_file", "required"], True),
    ("tls_server_config:\n  cert_file: nope.crt\n  key_file: {key}\n", ["cert_file", "nope.crt", "no such file"], True),
    ("tls_server_config:\n  cert_file: {key}\n  key_file: {cert}\n", ["cert_file", "cannot load"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
     ["tls_server_config.min_version", "TLS14"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  max_version: tls12\n",
     ["tls_server_config.max_version", "tls12"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: Bogus\n",
     ["tls_server_config.client_auth_type", "Bogus"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {ca}\n",
     ["tls_server_config.client_auth_type", "not asked for"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: missing-ca.crt\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", ["client_ca_file", "missing-ca.crt"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
     ["tls_server_config.cipher_suites", "TLS_RSA_WITH_RC4_128_SHA"], True),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  curve_preferences: [P256]\n",
     ["tls_server_config.curve_preferences", "P256"], True),
    ("http_server_config:\n  headers:\n    Server: evil\n", ["http_server_config.headers.Server", "cannot be configured"], True),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", ["X-Frame-Options", "deny, sameorigin"], True),
    ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", ["X-Content-Type-Options", "nosniff"], True),
    ("http_server_config:\n  http2: maybe\n", ["http_server_config.http2", "true or false"], True),
    ("basic_auth_users:\n  alice: hunter2\n", ["basic_auth_users.alice", "bcrypt"], True),
    ("basic_auth_users: [alice]\n", ["basic_auth_users", "mapping"], True),
    ("tls_server_config: [1, 2\n", ["line 2", "expected"], True),
    ("basic_auth_users:\n  alice: {hash}\n  alice: {hash}\n", ["duplicate key", "alice"], True),
    # stricter than promtool: each would silently weaken or break the server
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS13\n  max_version: TLS12\n",
     ["tls_server_config.min_version", "above max_version"], False),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n",
     ["tls_server_config.client_ca_file", "required"], False),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n",
     ["tls_server_config.client_auth_type", "without verifying"], False),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {key}\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", ["tls_server_config.client_ca_file"], False),
    ("tls_server_config:\n  min_version: TLS13\n", ["tls_server_config.cert_file", "required"], False),
    ("- 1\n", ["top level must be a mapping"], True),
]


@pytest.mark.parametrize("text,words,promtool_rejects", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_files_are_one_line_naming_the_key(pki, text, words, promtool_rejects):
    path = write(pki, "bad.yml", text)
    with pytest.raises(WebConfigError) as ei:
        load_web_config(str(path))
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(f"web config {path}: "), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    ok, out = promtool_ok(path)
    assert ok is (not promtool_rejects), f"promtool: {out}"


# ---------------------------------------------------------------- property: gpulse ⊆ promtool

def _choice(valid: list, invalid: list):
    return st.one_of(st.sampled_from(valid), st.sampled_from(invalid))


@st.composite
def web_configs(draw):
    doc: dict = {}
    if draw(st.booleans()):
        tls: dict = {}
        for key, valid, invalid in (
            ("cert_file", ["{cert}"], ["{key}", "missing.crt", 7]),
            ("key_file", ["{key}"], ["{cert}", "", None]),
            ("client_auth_type", ["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"],
             ["RequestClientCert", "RequireAnyClientCert", "require", 1]),
            ("client_ca_file", ["{ca}"], ["{key}", "nope.pem"]),
            ("min_version", ["TLS12", "TLS13", "TLS10"], ["TLS1.2", "SSL3", 12]),
            ("max_version", ["TLS12", "TLS13"], ["TLS14", True]),
            ("cipher_suites", [["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"], ["TLS_AES_128_GCM_SHA256"], []],
             [["TLS_RSA_WITH_3DES_EDE_CBC_SHA"], "TLS_AES_128_GCM_SHA256"]),
            ("prefer_server_cipher_suites", [True, False], ["yes please"]),
            ("curve_preferences", [["X25519"], ["CurveP384", "CurveP256"]], [["secp256r1"]]),
            ("bogus_key", [], [1]),
        ):
            if draw(st.integers(0, 3)) == 0:
                continue
            if valid and draw(st.integers(0, 4)) > 0:
                tls[key] = draw(st.sampled_from(valid))
            else:
                tls[key] = draw(st.sampled_from(invalid))
        doc["tls_server_config"] = tls
    if draw(st.booleans()):
        headers = draw(st.dictionaries(
            st.sampled_from(["X-Frame-Options", "X-Content-Type-Options", "Strict-Transport-Security",
                             "Server", "x-frame-options"]),
            st.sampled_from(["deny", "nosniff", "max-age=60", "", "DENY"]), max_size=3))
        doc["http_server_config"] = {"headers": headers, "http2": draw(st.sampled_from([True, False, "x"]))}
    if draw(st.booleans()):
        doc["basic_auth_users"] = draw(st.dictionaries(
            st.sampled_from(["alice", "bob", "c:d"]), st.sampled_from(["{hash}", "plain", "$2y$10$short"]),
            max_size=2))
    if draw(st.integers(0, 9)) == 0:
        doc["rate_limit"] = {"interval": "1s"}
    return doc


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=web_configs())
def test_property_gpulse_accepts_only_what_promtool_accepts(pki, doc):
    path = write(pki, "prop.yml", yaml.safe_dump(doc).replace("'{", "{").replace("}'", "}"))
    try:
        load_web_config(str(path))
        accepted, why = True, ""
    except WebConfigError as e:
        accepted, why = False, str(e)
        assert "\n" not in why
    ok, out = promtool_ok(path)
    if accepted:
        assert ok, f"gpulse accepts, promtool rejects: {out}\n{path.read_text()}"
