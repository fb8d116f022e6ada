"""The Prometheus range reader raises the sources' own SourceError; the report turns it
into a ReportError with the same one line, so `gpulse report` prints it and exits 1."""
from __future__ import annotations

import socket

import pytest

from gpulse.report.errors import ReportError
from gpulse.report.inputs import from_prometheus
from gpulse.sources import prom
from gpulse.sources.base import SourceError
from testing.httpstub import StubServer


@pytest.fixture
def rejecting_prometheus():
    """A real HTTP server answering every query the way Prometheus rejects a bad one."""
    body = b'{"status": "error", "errorType": "bad_data", "error": "parse error at char 3\\nmore"}'
    with StubServer(lambda path, params: (400, body)) as srv:
        yield srv.url


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_source_raises_its_own_error_and_the_report_keeps_the_line(rejecting_prometheus):
    client = prom.PromClient(rejecting_prometheus, prom.Auth(), 10.0)
    with pytest.raises(SourceError) as raw:
        client.query("up", 1.7e9)
    assert not isinstance(raw.value, ReportError)
    assert str(raw.value) == "Prometheus rejected the query (bad_data): parse error at char 3"
    with pytest.raises(ReportError) as mapped:
        from_prometheus(rejecting_prometheus, 1.7e9, 1.7e9 + 3600, prom.selector(), step=15)
    assert str(mapped.value) == str(raw.value) and mapped.value.exit_code == 1


def test_unreachable_prometheus_is_a_report_error():
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ReportError) as e:
        from_prometheus(url, 1.7e9, 1.7e9 + 3600, prom.selector(), timeout=5)
    assert str(e.value).startswith(f"cannot reach Prometheus at {url}: ") and "\n" not in str(e.value)


def test_unreadable_secret_is_a_report_error(tmp_path):
    missing = tmp_path / "no-such-password"
    auth = prom.Auth(username="gpulse", password_file=str(missing))
    with pytest.raises(SourceError):
        prom.PromClient("http://127.0.0.1:9", auth, 5.0)
    with pytest.raises(ReportError) as e:
        from_prometheus("http://127.0.0.1:9", 1.7e9, 1.7e9 + 3600, prom.selector(), auth=auth)
    assert str(e.value) == f"cannot read the password file {missing}: No such file or directory"
