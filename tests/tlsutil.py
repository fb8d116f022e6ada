"""Test PKI made on the spot: a CA, a server certificate for 127.0.0.1/localhost,
client certificates (one from the CA, one from a stranger CA), bcrypt hashes and
web config files. Nothing here is checked in; every test gets fresh keys."""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testing.daemons import wait_http


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


@dataclass
class Issued:
    cert: Path
    key: Path


class CA:
    def __init__(self, d: Path, cn: str = "gpulse test CA"):
        self.dir = d
        self.key = _key()
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.path = _write_cert(self.cert, d / f"{cn.replace(' ', '-')}.crt")

    def issue(self, cn: str, server: bool, days: float = 1) -> Issued:
        key = _key()
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        stem = cn.replace(" ", "-")
        return Issued(_write_cert(cert, self.dir / f"{stem}.crt"), _write_key(key, self.dir / f"{stem}.key"))


def bcrypt_hash(password: str, cost: int = 4) -> str:
    """Cost 4 keeps tests fast; the format is the one htpasswd -B writes ($2y$)."""
    h = bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()
    return "$2y$" + h[4:]


def write_web_config(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start_tls(gpulse_proc, web, ca, *args, client=None, auth=None):
    """A simulated `gpulse serve` with `web` as its web config file, ready over HTTPS."""
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--web.config.file", str(web), *args, ready=False)
    try:
        assert g.url.startswith("https://"), g.url
        wait_http(g.url + "/readyz", verify=str(ca), cert=client, auth=auth)
    except AssertionError:
        raise AssertionError(f"gpulse did not become ready: {g.output()}") from None
    return g
