"""How a raw setting is read: the value parsers (durations, booleans, bounded
integers and strings, lists, listen addresses) and ConfigError, the one-line error
they lead to. Each parser raises ValueError(reason); the caller adds the key and
where the value came from."""
from __future__ import annotations

import math
import re
from typing import Any

from ..safeyaml import shown


class ConfigError(ValueError):
    """A bad setting. str() is the one line shown to the user."""


# Longest integer accepted anywhere: bounds are checked on the number, and a
# 400-digit one cannot even be formatted as a float in a message.
MAX_INT_DIGITS = 18
# Longest string setting (PATH_MAX): a node name or path beyond it is an attack or a mistake.
MAX_STR_CHARS = 4096



_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$", re.ASCII)
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """'100ms', '1.5s', '5m', '2h' or a bare number of seconds -> seconds (finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration like 100ms or 30s, got {shown(value)}")
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if not m:
            raise ValueError(f"expected a duration like 100ms or 30s, got {shown(value)}")
        value = float(m.group(1)) * _UNIT[m.group(2)]
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):   # YAML .nan / .inf, or 400 digits of seconds
        raise ValueError(f"expected a finite duration like 100ms or 30s, got {shown(value)}")
    return seconds


def format_duration(seconds: float) -> str:
    """The way people write it and parse_duration reads it back: 0.1 -> '100ms',
    30 -> '30s', 900 -> '15m', 1.5 -> '1.5s'."""
    for unit in ("h", "m", "s"):
        n = seconds / _UNIT[unit]
        if n >= 1 and n == round(n):
            return f"{round(n)}{unit}"
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {shown(value)}")


def parse_auto_bool(value: Any) -> bool | str:
    """true/false, or "auto" (decided at start-up from what the machine has)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return parse_bool(value)
    except ValueError:
        raise ValueError(f"expected true, false or auto, got {shown(value)}") from None


def parse_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
        digits = len(value.strip().lstrip("+-"))
        if digits > MAX_INT_DIGITS:      # int() of it would work, but nothing can use it
            raise ValueError(f"expected an integer of at most {MAX_INT_DIGITS} digits, got a {digits}-digit number")
        n = int(value)
    else:
        raise ValueError(f"expected an integer, got {shown(value)}")
    if abs(n) >= 10 ** MAX_INT_DIGITS:
        raise ValueError(f"expected an integer of at most {MAX_INT_DIGITS} digits, got {shown(n)}")
    return n


def parse_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {shown(value)}")
    try:
        f = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {shown(value)}") from None
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"expected a finite number, got {shown(value)}")
    return f


def _text(s: str) -> str:
    # a NUL reaches open() and the OS as "embedded null byte"; no setting needs one,
    # nor a value longer than the longest path
    if "\x00" in s:
        raise ValueError("contains a NUL character")
    if len(s) > MAX_STR_CHARS:
        raise ValueError(f"longer than {MAX_STR_CHARS} characters ({len(s)})")
    return s


def parse_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {shown(value)}")
    return _text(str(value))


def parse_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in _text(value).split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(_text(v) for v in value)
    raise ValueError(f"expected a list of strings, got {shown(value)}")


def parse_listen_address(value: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[::1]:PORT' -> (host, port); empty host = all interfaces."""
    s = str(value).strip()
    m = re.match(r"^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$", s)
    if not m:
        raise ValueError(f"expected HOST:PORT or :PORT, got {shown(value)}")
    host = m.group(1) if m.group(1) is not None else (m.group(2) or "")
    port = int(m.group(3))
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0..65535, got {port}")
    return host, port

