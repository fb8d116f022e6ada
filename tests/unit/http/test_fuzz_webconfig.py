"""The web config file under fuzzed input: a config or one WebConfigError line (see tests/fuzzing.py)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ, PATHOLOGICAL_YAML, hostile_text, mutated, one_line
from gpulse.http.webconfig import WebConfigError, parse_web_config


WEB_SEED = """\
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS12
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
http_server_config:
  headers:
    X-Frame-Options: deny
basic_auth_users:
  prometheus: $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG
"""


@pytest.mark.parametrize("text", PATHOLOGICAL_YAML)
def test_web_config_pathological_yaml(text):
    with pytest.raises(WebConfigError) as e:
        parse_web_config(text, "w.yml")
    one_line(e.value)


@FUZZ
@given(text=st.one_of(hostile_text, mutated(WEB_SEED)))
def test_fuzz_web_config(text):
    try:
        tls, users, headers, _ = parse_web_config(text, "fuzz.yml")
    except WebConfigError as e:
        assert one_line(e).startswith("fuzz.yml: ")
        return
    for name, value in headers:     # whatever got through is safe to put on the wire
        assert "\r" not in value and "\n" not in value and value
