"""Content negotiation headers under fuzzed input: always an answer, never an error."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ, hostile_text
from gpulse.collector import wants_openmetrics
from gpulse.http.app import accepts_gzip


@FUZZ
@given(accept=st.one_of(st.none(), hostile_text, st.lists(st.sampled_from(
    ["application/openmetrics-text", "text/plain", ";q=", "q=0", "q=nan", "q=1e999", "version=1.0.0", ",", ";", "*/*"]),
    max_size=8).map("".join)))
def test_fuzz_accept_header(accept):
    assert wants_openmetrics(accept) in (True, False)


@FUZZ
@given(encoding=st.one_of(st.none(), hostile_text, st.lists(st.sampled_from(
    ["gzip", "x-gzip", "GZIP", "identity", "br", "*", ";q=", "q=0", "q=0.0", "q=nan", "q=1e999", "q=-1", ",", ";", " "]),
    max_size=8).map("".join)))
def test_fuzz_accept_encoding_header(encoding):
    answer = accepts_gzip(encoding)
    assert answer in (True, False)
    if answer:      # gzip only when the client named it
        assert "gzip" in encoding.lower()
