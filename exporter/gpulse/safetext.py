"""Text and JSON that came from outside, made safe where gpulse reads or writes it.

Names a tenant or a log controls (a pod's owner, a dcgm `Hostname`, a file name, a
label from Prometheus) travel into HTML pages, JSON files, the exposition and the
terminal. Each way out has one function here, so every caller escapes the same way:

- `clean`: a lone UTF-16 surrogate (`"\\ud800"` in JSON from a non-conformant
  server) becomes U+FFFD where the text is read; such a string cannot be encoded
  as UTF-8, so left in it would fail every write of the exposition or the report.
- `loads`: `json.loads` with `clean` applied to every string of the result.
- `finite`: NaN and ±Inf become null, so JSON written by gpulse is JSON to strict
  parsers (`json.dumps` would write the bare words `NaN`/`Infinity`).
- `script_json`: JSON to embed in `<script type="application/json">`: `<`, `>`,
  `&` and U+2028/U+2029 as `\\u` escapes, so no value can end the element or
  start markup, whatever it holds.
- `fill`: a page template's `{{NAME}}` slots filled in one pass over the
  template alone, so a value holding `{{BODY}}` stays text.
- `terminal`: control characters (ESC sequences, carriage returns, bells) shown
  as escapes before a line goes to a terminal.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from typing import Any, Mapping

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")
_SLOT = re.compile(r"\{\{([A-Z_]+)\}\}")
# C0 and C1 controls and DEL; tab is kept (tables), newline is the caller's
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(s: str) -> str:
    """`s` with each lone surrogate replaced by U+FFFD (valid pairs never reach a
    Python str as two code points: the JSON and UTF-8 decoders join them)."""
    return _SURROGATE.sub("\ufffd", s) if _SURROGATE.search(s) else s


def clean_all(doc: Any) -> Any:
    """`clean` on every string (keys too) of a parsed JSON document."""
    if isinstance(doc, str):
        return clean(doc)
    if isinstance(doc, list):
        return [clean_all(v) for v in doc]
    if isinstance(doc, dict):
        return {clean(k): clean_all(v) for k, v in doc.items()}
    return doc


def loads(text: str | bytes) -> Any:
    """json.loads whose strings are all valid Unicode: bytes are decoded as JSON's
    own encoding detection says, invalid sequences as U+FFFD; only text that spells a
    surrogate escape (`\\uD800`-`\\uDFFF`) is walked a second time, as decoded text
    holds no surrogate otherwise."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(json.detect_encoding(text), "replace")
    doc = json.loads(text)
    return clean_all(doc) if _SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text) else doc


def finite(doc: Any) -> Any:
    """`doc` with every NaN and infinity replaced by None (JSON null)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, (list, tuple)):
        return [finite(v) for v in doc]
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    return doc


def dumps(doc: Any, **kw: Any) -> str:
    """Strict JSON: non-finite numbers as null, strings as valid Unicode.

    Most documents need neither repair, and the report's are megabytes: they are
    encoded once as they are, and walked (copied with finite and clean_all) only when
    that encoding meets a NaN or infinity, or writes a surrogate, paired or lone."""
    try:
        text = json.dumps(doc, allow_nan=False, **kw)
    except ValueError:            # a non-finite number
        return json.dumps(clean_all(finite(doc)), allow_nan=False, **kw)
    if _SURROGATE_ESCAPE.search(text) or _SURROGATE.search(text):
        return json.dumps(clean_all(finite(doc)), allow_nan=False, **kw)
    return text


def script_json(doc: Any) -> str:
    """Strict JSON safe as the text of a `<script type="application/json">` element."""
    return _SCRIPT_UNSAFE_RE.sub(lambda m: _SCRIPT_UNSAFE[m.group(0)], dumps(doc, separators=(",", ":")))


def fill(template: str, values: Mapping[str, str]) -> str:
    """The template with each `{{NAME}}` replaced by values[NAME], in one pass over
    the template only: a value is never searched for slots. A slot without a value
    is an error in gpulse, not in the input."""
    return _SLOT.sub(lambda m: values[m.group(1)], template)


def csp_hash(text: str) -> str:
    """The Content-Security-Policy source that allows exactly this inline script or
    stylesheet ('sha256-...')."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def terminal(s: str) -> str:
    """`s` with control characters written as escapes (`\\x1b`), so a name from a log
    cannot move the cursor, clear the screen or retitle the window."""
    s = clean(s)
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), s) if _CONTROL.search(s) else s
