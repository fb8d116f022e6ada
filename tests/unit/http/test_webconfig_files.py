"""Loading the web config file, in the test process: what does not need promtool
(tests/integration/http/test_security_webconfig.py holds gpulse against promtool)."""
from __future__ import annotations

import sys

import pytest

from gpulse.http.webconfig import WebConfigError, load_web_config
from tlsutil import CA, bcrypt_hash


def test_unreadable_and_binary_files(tmp_path):
    with pytest.raises(WebConfigError, match=r"^web config /nonexistent/web\.yml: no such file or directory$"):
        load_web_config("/nonexistent/web.yml")
    p = tmp_path / "bin.yml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        load_web_config(str(p))
    p.write_text("[" * 1500)
    with pytest.raises(WebConfigError, match="nest"):
        load_web_config(str(p))


def test_bcrypt_is_needed_only_for_basic_auth(tmp_path, monkeypatch):
    """bcrypt is the [auth] extra: without it gpulse serves TLS or plain HTTP, and a
    file with users is one line saying what to install."""
    server = CA(tmp_path).issue("server", server=True)
    users = tmp_path / "no-bcrypt-users.yml"
    users.write_text(f"basic_auth_users:\n  prometheus: {bcrypt_hash('s3cret')}\n")
    monkeypatch.setitem(sys.modules, "bcrypt", None)          # import bcrypt now fails
    tls = tmp_path / "no-bcrypt-tls.yml"
    tls.write_text(f"tls_server_config:\n  cert_file: {server.cert.name}\n  key_file: {server.key.name}\n")
    assert load_web_config(str(tls)).context is not None
    with pytest.raises(WebConfigError, match=r"basic_auth_users: the bcrypt package is not installed: "
                                             r"pip install 'gpulse\[auth\]'$"):
        load_web_config(str(users))
