"""Certificates and signed tokens for tests of authentication, made with the ``openssl`` CLI.

    pki = Pki(tmp_path / "pki")
    ca = pki.ca("ca")
    server = pki.server_cert("server", ca)                   # for 127.0.0.1 and localhost
    alice = pki.client_cert("alice", ca, "alice", ["team-a"])  # CN=alice, O=team-a
    daemon = Daemon.start(kubeconfig, insecure=False, extra_args=[
        f"--tls_cert={server.cert}", f"--tls_key={server.key}", f"--tls_client_ca={ca.cert}"])
    client = informerd.Client.connect(daemon.target, root_certificates=ca.cert,
                                      client_certificate=alice.cert, client_key=alice.key)

Keys are ECDSA P-256 (fast to make); certificates are valid from an hour ago for two days.
:func:`sign_jwt` signs a JSON Web Token with an RSA key (RS256), e.g. the service-account key of
:class:`informerd.testing.KubeApiServer`, to forge tokens the API server would otherwise never
issue (expired ones).
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key (PEM files)."""

    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["openssl", *args], cwd=cwd, input=stdin, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout


def _rdn(value: str) -> str:
    """``value`` escaped for an ``openssl -subj`` attribute."""
    for c in "\\/+":
        value = value.replace(c, "\\" + c)
    return value


_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class Pki:
    """Certificate authorities and the certificates they sign, as files in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def ca(self, name: str) -> KeyPair:
        """A self-signed CA ``CN=<name>`` (``<name>.crt``, ``<name>.key``)."""
        _openssl(
            *("req", "-x509", *_KEY, "-days", "2", "-subj", f"/CN={_rdn(name)}"),
            *("-keyout", f"{name}.key", "-out", f"{name}.crt"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"),
            cwd=self.dir,
        )
        return KeyPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    def _leaf(self, name: str, ca: KeyPair, subject: str, extensions: str) -> KeyPair:
        _openssl(
            *("req", *_KEY, "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr"),
            cwd=self.dir,
        )
        (self.dir / f"{name}.ext").write_text(extensions)
        _openssl(
            *("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert), "-CAkey", str(ca.key)),
            *("-set_serial", str(secrets.randbits(63) + 1)),
            *("-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt"),
            cwd=self.dir,
        )
        return KeyPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    def server_cert(
        self,
        name: str,
        ca: KeyPair,
        ips: Sequence[str] = ("127.0.0.1",),
        dns: Sequence[str] = ("localhost",),
    ) -> KeyPair:
        """A serving certificate signed by ``ca`` for these IP addresses and DNS names."""
        sans = ",".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{d}" for d in dns)])
        return self._leaf(
            name,
            ca,
            f"/CN={_rdn(name)}",
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"
            "keyUsage=critical,digitalSignature\n",
        )

    def client_cert(self, name: str, ca: KeyPair, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate signed by ``ca`` for ``user`` (CN) in ``groups`` (one O each),
        as Kubernetes reads client certificates."""
        subject = f"/CN={_rdn(user)}" + "".join(f"/O={_rdn(g)}" for g in groups)
        return self._leaf(
            name,
            ca,
            subject,
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n",
        )

    def rsa_key(self, name: str, bits: int = 2048) -> Path:
        """A new PEM RSA private key ``<name>.key`` (to sign tokens with, see :func:`sign_jwt`)."""
        _openssl("genrsa", "-out", f"{name}.key", str(bits), cwd=self.dir)
        return self.dir / f"{name}.key"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the claims of a JSON Web Token (not verified)."""
    header, claims, _ = token.split(".")

    def decode(part: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return value

    return decode(header), decode(claims)


def sign_jwt(header: Mapping[str, Any], claims: Mapping[str, Any], rsa_key: Path) -> str:
    """A JSON Web Token of ``header`` (``alg`` is set to RS256) and ``claims``, signed with the
    PEM RSA private key ``rsa_key`` (``openssl dgst -sha256 -sign``)."""
    head = {**header, "alg": "RS256"}
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (head, claims)
    )
    signature = _openssl(
        "dgst", "-sha256", "-sign", str(rsa_key), cwd=rsa_key.parent, stdin=signing_input.encode()
    )
    return f"{signing_input}.{_b64url(signature)}"
