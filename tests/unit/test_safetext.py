"""safetext: what every page, JSON file and terminal line of gpulse does with text
from outside."""
from __future__ import annotations

import json

import pytest

from gpulse.safetext import clean, csp_hash, dumps, fill, finite, loads, script_json, terminal


def test_lone_surrogates_become_the_replacement_character_where_json_is_read():
    doc = loads('{"pod": "a\\ud800b", "\\udfff": ["\\ud83d\\ude00", 1]}')
    assert doc == {"pod": "a\ufffdb", "\ufffd": ["\U0001f600", 1]}
    for s in ("a\ufffdb", "\U0001f600"):
        s.encode("utf-8")
    assert clean("plain") == "plain" and loads(b'{"a": "\\u00e9"}') == {"a": "\u00e9"}
    # bytes that are no UTF-8, a byte-order mark, UTF-16: decoded as JSON detects, invalid bytes replaced
    assert loads(b'\xef\xbb\xbf{"a": "x\xff"}') == {"a": "x\ufffd"}
    assert loads('{"a": "\u00e9"}'.encode("utf-16-le")) == {"a": "\u00e9"}


def test_strict_json_has_no_nan_or_infinity():
    doc = {"a": float("nan"), "b": [1.0, float("inf"), -float("inf")], "c": {"d": 0.5}, "e": "x\ud800"}
    text = dumps(doc)
    assert json.loads(text, parse_constant=lambda w: pytest.fail(f"{w} in strict JSON")) == \
        {"a": None, "b": [1.0, None, None], "c": {"d": 0.5}, "e": "x\ufffd"}
    assert finite((1.0, float("nan"))) == [1.0, None]


def test_strict_json_repairs_each_defect_alone_and_leaves_sound_text_as_json_writes_it():
    # dumps encodes a sound document once and walks it only for a defect: each one
    # alone must still send it down the repairing path
    for doc, want in (({"e": ["x\ud800"]}, {"e": ["x\ufffd"]}),             # a lone surrogate, no NaN
                      ({"\udfff": 1.0}, {"\ufffd": 1.0}),                   # in a key
                      ({"a": (1.0, float("-inf"))}, {"a": [1.0, None]})):    # a non-finite number alone
        for kw in ({}, {"ensure_ascii": False}, {"indent": 2}):
            text = dumps(doc, **kw)
            text.encode("utf-8")
            assert json.loads(text, parse_constant=lambda w: pytest.fail(f"{w} in strict JSON")) == want
    sound = {"emoji": "\U0001f600", "t": (1, 2.5), "n": None, "nested": [{"k": "v"}]}
    for kw in ({}, {"ensure_ascii": False}, {"indent": 2, "separators": (",", ":")}):
        assert dumps(sound, **kw) == json.dumps(sound, **kw)


def test_script_json_cannot_end_its_element_or_start_markup():
    doc = {"name": "</script><!--<script>&\u2028\u2029"}
    text = script_json(doc)
    assert not any(c in text for c in "<>&\u2028\u2029")
    assert json.loads(text) == doc


def test_fill_is_one_pass_over_the_template():
    page = fill("<title>{{TITLE}}</title>{{BODY}}", {"TITLE": "{{BODY}}", "BODY": "{{TITLE}}"})
    assert page == "<title>{{BODY}}</title>{{TITLE}}"
    with pytest.raises(KeyError):
        fill("{{MISSING}}", {})


def test_csp_hash_is_the_sha256_a_browser_computes():
    # the value a browser reports for an empty inline script
    assert csp_hash("") == "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"


def test_terminal_shows_control_characters_as_escapes():
    host = "node\x1b]0;owned\x07\x1b[2J\rhidden\x9b31m\tok"
    shown = terminal(host)
    assert shown == "node\\x1b]0;owned\\x07\\x1b[2J\\rhidden\\x9b31m\tok"
    assert terminal("GPU 0 at 99 % — fine") == "GPU 0 at 99 % — fine"
