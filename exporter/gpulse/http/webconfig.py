"""The web config file (--web.config.file): TLS, basic auth and response headers.

The format is the one Prometheus exporters share (the exporter-toolkit web
configuration), so one file serves node_exporter, dcgm-exporter and gpulse alike:

    tls_server_config:
      cert_file: server.crt            # relative paths: relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

The keys are those `promtool check web-config` knows; a file gpulse accepts also
passes promtool. gpulse is stricter in a few places, each a setting that would
otherwise silently weaken or break the server: min_version above
max_version; a client_auth_type that verifies certificates without a
client_ca_file (Go would fall back to the system roots: any public CA's client
certificate would do); RequestClientCert and RequireAnyClientCert (they accept any
certificate without verifying it); a client_ca_file without a certificate in it.

Every problem is a WebConfigError whose text is one line naming the file and key.
Building the result loads the certificate, key and CA files, so a file that loads
here serves; nothing is read from disk again until the next load (SIGHUP).
"""
from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..safeyaml import MAX_FILE_BYTES, FileTextError, read_text, shown
from ..safeyaml import StrictLoader as _StrictLoader   # duplicate keys and alias bombs refused


TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's client auth policies -> OpenSSL verify mode. None: refused (see module doc).
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    "RequestClientCert": None,
    "RequireAnyClientCert": None,
}

# Go cipher suite names (crypto/tls CipherSuites(), the set exporter-toolkit accepts)
# -> OpenSSL names. TLS 1.3 suites are not configurable in Go either; they are
# accepted and left to the TLS library, as Go does.
CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}

CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

# Headers the file may set, with the values allowed (None: any non-empty value).
HEADERS = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
            "cipher_suites", "prefer_server_cipher_suites", "curve_preferences")
HTTP_KEYS = ("http2", "headers")
TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")

# bcrypt as Go's x/crypto/bcrypt and the Python bcrypt package both read it
BCRYPT_RE = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")


class WebConfigError(ValueError):
    """A bad web config. str() is the one line shown to the user."""


@dataclass(frozen=True)
class TLSSettings:
    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str = ""
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


@dataclass(frozen=True)
class WebConfig:
    """A loaded web config. `context` is the ready server-side SSLContext (None: plain HTTP)."""

    path: str = ""
    tls: TLSSettings | None = None
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    users: dict[str, bytes] = field(default_factory=dict)     # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    http2: bool = True       # accepted for compatibility; gpulse speaks HTTP/1.1 only

    @property
    def auth_required(self) -> bool:
        return bool(self.users)


NO_WEB_CONFIG = WebConfig()


# ---------------------------------------------------------------- YAML


def _read_yaml(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise WebConfigError(f"{where}:{line} {problem}") from None
    except RecursionError:
        raise WebConfigError(f"{where}: nested too deeply") from None
    except ValueError as e:    # a value YAML cannot build: a 5000-digit number, month 13
        raise WebConfigError(f"{where}: unreadable value: {str(e).split(';')[0]}") from None


# ---------------------------------------------------------------- validation


class _Checker:
    def __init__(self, where: str, base_dir: str):
        self.where = where
        self.base_dir = base_dir

    def fail(self, key: str, msg: str) -> WebConfigError:
        return WebConfigError(f"{self.where}: {key}: {msg}")

    def mapping(self, key: str, v: Any, allowed: tuple[str, ...] | None) -> dict:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(key, f"expected a mapping, got {_kind(v)}")
        if allowed is not None:
            for k in v:
                if k not in allowed:
                    name = f"{key}.{k}" if key else str(k)
                    raise self.fail(name, f"unknown key (known: {', '.join(allowed)})")
        return v

    def string(self, key: str, v: Any) -> str:
        if v is None:
            return ""
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {_kind(v)}")
        if "\x00" in v:
            raise self.fail(key, "contains a NUL character")
        return v

    def strings(self, key: str, v: Any) -> tuple[str, ...]:
        if v is None:
            return ()
        if not isinstance(v, list):
            raise self.fail(key, f"expected a list of strings, got {_kind(v)}")
        return tuple(self.string(key, x) for x in v)

    def boolean(self, key: str, v: Any, default: bool) -> bool:
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {shown(v)}")
        return v

    def path(self, key: str, v: Any) -> str:
        p = self.string(key, v)
        if p and not os.path.isabs(p):
            p = os.path.join(self.base_dir, p)
        return p


def _kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}.get(
        type(v), type(v).__name__)


def _tls_settings(c: _Checker, raw: Any) -> TLSSettings | None:
    d = c.mapping("tls_server_config", raw, TLS_KEYS)
    if not d:
        return None
    k = "tls_server_config."
    cert = c.path(k + "cert_file", d.get("cert_file"))
    key = c.path(k + "key_file", d.get("key_file"))
    if not cert:
        raise c.fail(k + "cert_file", "required when tls_server_config is set")
    if not key:
        raise c.fail(k + "key_file", "required when tls_server_config is set")
    auth = c.string(k + "client_auth_type", d.get("client_auth_type")) or "NoClientCert"
    if auth not in CLIENT_AUTH:
        raise c.fail(k + "client_auth_type", f"unknown policy {shown(auth)} (one of {', '.join(CLIENT_AUTH)})")
    if CLIENT_AUTH[auth] is None:
        raise c.fail(k + "client_auth_type", f"{auth} accepts certificates without verifying them; "
                     "use RequireAndVerifyClientCert with a client_ca_file")
    ca = c.path(k + "client_ca_file", d.get("client_ca_file"))
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not ca:
        raise c.fail(k + "client_ca_file", f"required with client_auth_type {auth}")
    if CLIENT_AUTH[auth] == ssl.CERT_NONE and ca:
        raise c.fail(k + "client_auth_type", "client_ca_file is set but client certificates are not asked for; "
                     "use RequireAndVerifyClientCert")
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = c.string(k + name, d.get(name)) or default
        if v not in TLS_VERSIONS:
            raise c.fail(k + name, f"unknown TLS version {shown(v)} (one of {', '.join(TLS_VERSIONS)})")
        versions[name] = v
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise c.fail(k + "min_version", f"{versions['min_version']} is above max_version {versions['max_version']}")
    ciphers = c.strings(k + "cipher_suites", d.get("cipher_suites"))
    for name in ciphers:
        if name not in CIPHERS:
            raise c.fail(k + "cipher_suites", f"unknown cipher suite {shown(name)}")
    curves = c.strings(k + "curve_preferences", d.get("curve_preferences"))
    for name in curves:
        if name not in CURVES:
            raise c.fail(k + "curve_preferences", f"unknown curve {shown(name)} (one of {', '.join(CURVES)})")
    prefer = c.boolean(k + "prefer_server_cipher_suites", d.get("prefer_server_cipher_suites"), True)
    return TLSSettings(cert, key, auth, ca, versions["min_version"], versions["max_version"],
                       ciphers, prefer, curves)


def _users(c: _Checker, raw: Any) -> dict[str, bytes]:
    d = c.mapping("basic_auth_users", raw, None)
    users: dict[str, bytes] = {}
    for user, h in d.items():
        if isinstance(user, bool) or not isinstance(user, (str, int)):
            raise c.fail("basic_auth_users", f"user names must be strings, got {shown(user)}")
        name = str(user)
        if ":" in name:
            # Basic credentials split at the first colon: this user could never log in
            raise c.fail(f"basic_auth_users.{name[:40]}", "a user name cannot contain ':'")
        key = f"basic_auth_users.{name[:40]}"
        hashed = c.string(key, h)
        if not BCRYPT_RE.match(hashed):
            raise c.fail(key, "not a bcrypt hash (expected $2y$<cost>$... as htpasswd -B writes it)")
        users[name] = hashed.encode()
    if users:
        from .basicauth import load_bcrypt
        try:
            load_bcrypt()
        except ImportError as e:
            raise c.fail("basic_auth_users", str(e)) from None
    return users


def _headers(c: _Checker, raw: Any) -> tuple[bool, tuple[tuple[str, str], ...]]:
    d = c.mapping("http_server_config", raw, HTTP_KEYS)
    http2 = c.boolean("http_server_config.http2", d.get("http2"), True)
    hd = c.mapping("http_server_config.headers", d.get("headers"), None)
    out = []
    for name, value in hd.items():
        key = f"http_server_config.headers.{name}"
        if name not in HEADERS:
            raise c.fail(key, f"this header cannot be configured (allowed: {', '.join(HEADERS)})")
        v = c.string(key, value)
        allowed = HEADERS[name]
        if allowed is not None and v not in allowed:
            raise c.fail(key, f"must be one of {', '.join(allowed)}, got {shown(v)}")
        if any(ch in v for ch in "\r\n"):
            raise c.fail(key, "contains a line break")
        if v:
            out.append((name, v))
    return http2, tuple(out)


def parse_web_config(text: str, where: str = "web config", base_dir: str = ".") -> tuple[
        TLSSettings | None, dict[str, bytes], tuple[tuple[str, str], ...], bool]:
    """Validate the YAML text without touching the disk: (tls, users, headers, http2)."""
    doc = _read_yaml(text, where)
    c = _Checker(where, base_dir)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise WebConfigError(f"{where}: top level must be a mapping, got {_kind(doc)}")
    c.mapping("", doc, TOP_KEYS)
    tls = _tls_settings(c, doc.get("tls_server_config"))
    users = _users(c, doc.get("basic_auth_users"))
    http2, headers = _headers(c, doc.get("http_server_config"))
    return tls, users, headers, http2


# ---------------------------------------------------------------- TLS


def build_context(tls: TLSSettings, where: str = "web config") -> ssl.SSLContext:
    """A server SSLContext with the certificate, key and client CA loaded."""
    k = f"{where}: tls_server_config."
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    # OpenSSL's errors do not say which file is missing: look first
    for name in ("cert_file", "key_file", "client_ca_file"):
        path = getattr(tls, name)
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise WebConfigError(f"{k}{name}: {path}: {(e.strerror or str(e)).lower()}") from None
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except OSError as e:          # includes ssl.SSLError
        which = _which_file(tls.cert_file, tls.key_file)
        raise WebConfigError(f"{k}{which}: cannot load {tls.cert_file} with {tls.key_file}: "
                             f"{_ssl_reason(e)}") from None
    if tls.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except OSError as e:
            raise WebConfigError(f"{k}client_ca_file: {tls.client_ca_file}: {_ssl_reason(e)}") from None
        if not ctx.get_ca_certs():
            raise WebConfigError(f"{k}client_ca_file: {tls.client_ca_file}: no CA certificate in it")
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type] or ssl.CERT_NONE
    suites = [CIPHERS[c] for c in tls.cipher_suites if CIPHERS[c]]
    if suites:
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise WebConfigError(f"{k}cipher_suites: none of {', '.join(tls.cipher_suites)} "
                                 "is available in this TLS library") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        # Python can set one ECDH group, not a list: the first preference is used
        ctx.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _which_file(cert: str, key: str) -> str:
    """Guess which of the pair is wrong, so the message names the right key."""
    try:
        with open(cert, "rb") as fh:
            has_cert = b"-----BEGIN CERTIFICATE-----" in fh.read(MAX_FILE_BYTES)
    except OSError:
        return "cert_file"
    return "key_file" if has_cert else "cert_file"


def _ssl_reason(e: OSError) -> str:
    if isinstance(e, ssl.SSLError):
        reason = e.reason or e.strerror or str(e)
        return str(reason).replace("_", " ").lower()
    return (e.strerror or str(e)).lower()


# ---------------------------------------------------------------- entry point


def load_web_config(path: str) -> WebConfig:
    """Read, validate and build a web config file. Raises WebConfigError (one line)."""
    if not path:
        return NO_WEB_CONFIG
    where = f"web config {path}"
    try:
        text = read_text(path)
    except FileTextError as e:
        raise WebConfigError(f"{where}: {str(e).lower() if e.oserror else e}") from None
    tls, users, headers, http2 = parse_web_config(text, where, os.path.dirname(os.path.abspath(path)))
    ctx = build_context(tls, where) if tls is not None else None
    return WebConfig(path, tls, ctx, users, headers, http2)


__all__ = ["WebConfig", "WebConfigError", "TLSSettings", "NO_WEB_CONFIG", "load_web_config",
           "parse_web_config", "build_context"]
