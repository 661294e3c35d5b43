"""The door's TLS: its own CA and server certificate in `data/door/` (owner-only), made on first use
and renewed when they near expiry or the address sandboxes use changed; or the operator's own pair
(NANOCLAW_DOOR_TLS_CERT / _KEY). Sandboxes get the CA with their pass and trust nothing else."""
from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..security import write_atomic

CA_DAYS = 3650
CERT_DAYS = 365
RENEW_DAYS = 30


@dataclass(frozen=True)
class DoorTls:
    cert: Path
    key: Path
    ca_pem: str  # what a sandbox trusts: the door's CA, or the operator's certificate chain

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _save(path: Path, data: bytes) -> None:
    write_atomic(path, lambda f: f.write(data), mode=0o600)


def _fresh(cert_path: Path, hosts: set[str], now: datetime.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(n.value) for n in names}
    return hosts <= have and cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS)


def url_host(url: str) -> str:
    host = urlsplit(url).hostname
    if not host:
        raise ValueError(f"NANOCLAW_DOOR_URL={url!r} has no host (e.g. https://10.0.0.5:8443)")
    return host


def own_tls(folder: Path, hosts: set[str]) -> DoorTls:
    """The door's CA and a server certificate for `hosts` (the address in NANOCLAW_DOOR_URL and any
    other the operator lists), made or renewed as needed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    with open(folder / ".lock", "a") as lock:  # the service and the proxy may both ask at start-up
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _own_tls(folder, hosts)


def _own_tls(folder: Path, hosts: set[str]) -> DoorTls:
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_cert_path, ca_key_path = folder / "ca.pem", folder / "ca.key"
    cert_path, key_path = folder / "door.pem", folder / "door.key"
    try:
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        if ca_cert.not_valid_after_utc - now < datetime.timedelta(days=RENEW_DAYS):
            raise ValueError("CA near expiry")
    except (OSError, ValueError):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = (x509.CertificateBuilder().subject_name(_name("NanoClaw door CA")).issuer_name(_name("NanoClaw door CA"))
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                   .sign(ca_key, hashes.SHA256()))
        _save(ca_key_path, _pem_key(ca_key))
        _save(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM))
        cert_path.unlink(missing_ok=True)  # signed by the old CA
    if not _fresh(cert_path, hosts, now) or not key_path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name("NanoClaw door")).issuer_name(ca_cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName([_san(h) for h in sorted(hosts)]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        _save(key_path, _pem_key(key))
        _save(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return DoorTls(cert_path, key_path, ca_cert_path.read_text())


def door_tls(settings) -> DoorTls:
    """The operator's pair when given (the sandbox then trusts that certificate's chain as given),
    else the door's own."""
    if settings.door_tls_cert and settings.door_tls_key:
        return DoorTls(Path(settings.door_tls_cert), Path(settings.door_tls_key),
                       Path(settings.door_tls_cert).read_text())
    return own_tls(settings.data_dir / "door", {url_host(settings.door_url)})
