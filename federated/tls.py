"""TLS for the deployment engine: the certificate files a SuperLink serves with and its clients
trust, checked before any process starts, and a throw-away CA for loopback runs and tests.

The SuperLink presents ``server_cert`` (with ``server_key``), signed by ``ca_cert``; SuperNodes
and ``flwr run`` verify it against ``ca_cert``. A client given another CA refuses the link.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: the CA certificate clients trust, and the SuperLink's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def check(self) -> TLSFiles:
        """Each file exists and parses as what it is said to be; a ValueError names the one that does not."""
        for name, loader in (("ca_cert", x509.load_pem_x509_certificate), ("server_cert", x509.load_pem_x509_certificate),
                             ("server_key", lambda data: serialization.load_pem_private_key(data, password=None))):
            path = Path(getattr(self, name))
            try:
                loader(path.read_bytes())
            except OSError as err:
                raise ValueError(f"TLS {name} {str(path)!r} cannot be read: {err.strerror}") from None
            except (ValueError, TypeError) as err:
                raise ValueError(f"TLS {name} {str(path)!r} is not a PEM "
                                 f"{'private key' if name == 'server_key' else 'certificate'}: {err}") from None
        return self


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_certificates(directory: str | Path, host: str = "127.0.0.1", *, days: int = 2,
                      ca_name: str = "edgekit test CA") -> TLSFiles:
    """A new CA and a server certificate for ``host`` (an IP address or a DNS name) signed by it,
    written into ``directory`` as ``ca.pem``, ``server.pem`` and ``server.key``. For loopback
    runs and tests: a real deployment's certificates come from its own CA."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    try:
        alt = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
              .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    files = TLSFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(files.server_key, server_key)
    return files
