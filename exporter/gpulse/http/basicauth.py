"""HTTP basic authentication against the bcrypt hashes of the web config.

bcrypt is slow on purpose (~50-100 ms at cost 10), and Prometheus sends the same
credentials with every scrape, so a successful check is remembered: keyed by an
HMAC of user, hash and password under a per-process random key, which keeps the
password itself out of memory and makes a changed hash (SIGHUP) miss the cache.
Failures are never cached and every check - known user or not - does the bcrypt
work of the costliest configured hash: an unknown user is checked against that
hash, a user of a lower cost c against their own hash and then against dummy hashes
of costs c, c+1, ..., M-1 (2^c + 2^c + ... + 2^(M-1) = 2^M rounds), so the answer
time tells neither which user names exist nor which of them have cheap hashes. `cached()` answers without bcrypt
where it can (a remembered login, a malformed header); the server runs
`verify()` for the rest on BCRYPT_SLOTS threads of their own with at most
BCRYPT_QUEUE checks waiting, and answers "busy" beyond that, so a
password-guessing flood costs a bounded share of the CPU, never a request slot,
and the sampler keeps its own.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from typing import Any

BCRYPT_SLOTS = 2
BCRYPT_QUEUE = 8          # checks waiting for a slot; one more is "busy" at once
CACHE_SIZE = 256
# bcrypt reads the first 72 bytes; htpasswd and Go compare just those, so do the same
BCRYPT_MAX = 72
OK, DENIED, BUSY = "ok", "denied", "busy"


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """'Basic base64(user:password)' -> (user, password bytes); None when absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def load_bcrypt() -> Any:
    """The bcrypt module (the [auth] extra); ImportError names what to install."""
    try:
        import bcrypt
    except ImportError:
        raise ImportError("the bcrypt package is not installed: pip install 'gpulse[auth]'") from None
    return bcrypt


def cost(hashed: bytes) -> int:
    """The cost of a $2y$NN$ hash (webconfig has checked the form)."""
    return int(hashed[4:6])


def dummy_hash(c: int) -> bytes:
    """A well-formed bcrypt hash of cost c that no password matches in practice:
    checking against it costs what a real hash of that cost costs, and it needs no
    hashing to make."""
    return b"$2b$%02d$" % c + b"." * 53


class BasicAuth:
    def __init__(self, users: dict[str, bytes]):
        self.users = dict(users)
        # imported only when there are users: gpulse without basic auth needs no bcrypt
        self._bcrypt = load_bcrypt() if self.users else None
        # an unknown user is checked against a real hash (result ignored) of the
        # highest cost configured, so no user name answers faster than a real one
        self._decoy = max(self.users.values(), key=cost, default=None)
        top = cost(self._decoy) if self._decoy is not None else 0
        # the padding a user of a lower cost gets after their own check, per cost
        self._pad = {c: tuple(dummy_hash(k) for k in range(c, top)) for c in {cost(h) for h in self.users.values()}}
        self._key = os.urandom(32)
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()

    def _cache_key(self, user: str, hashed: bytes, password: bytes) -> bytes:
        msg = b"\0".join((user.encode(), hashed, password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def cached(self, header: str | None) -> str | None:
        """OK or DENIED when known without bcrypt; None when verify() must run."""
        creds = parse_basic(header)
        if creds is None or self._decoy is None:
            return DENIED
        user, password = creds
        hashed = self.users.get(user)
        if hashed is not None and self._cache_key(user, hashed, password) in self._ok:
            return OK

    def _check(self, password: bytes, hashed: bytes) -> bool:
        try:
            return bool(self._bcrypt.checkpw(password[:BCRYPT_MAX], hashed))
        except ValueError:          # a hash the library cannot read: no one gets in with it
            return False
        return None

    def verify(self, header: str | None) -> str:
        """OK or DENIED, running bcrypt once (slow on purpose: off the event loop)."""
        creds = parse_basic(header)
        if creds is None or self._decoy is None:
            return DENIED
        user, password = creds
        hashed = self.users.get(user)
        target = hashed if hashed is not None else self._decoy
        good = self._check(password, target)
        for pad in self._pad.get(cost(target), ()) if hashed is not None else ():
            self._check(password, pad)
        if not (good and hashed is not None):
            return DENIED
        with self._lock:
            if len(self._ok) >= CACHE_SIZE:
                self._ok.clear()
            self._ok.add(self._cache_key(user, hashed, password))
        return OK

    def _check(self, password: bytes, hashed: bytes) -> bool:
        try:
            return bool(self._bcrypt.checkpw(password[:BCRYPT_MAX], hashed))
        except ValueError:          # a hash the library cannot read: no one gets in with it
            return False
