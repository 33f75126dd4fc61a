"""How the SDK reaches a daemon: connection options, the channel, deadlines, reconnect backoff."""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

# The daemon lets clients ping every second at most; pings more often get the connection closed
# ("too_many_pings"). A ping every 2 s with a 2 s timeout notices a stopped or unreachable daemon
# within about 4 s: a Work stream on a frozen leader breaks (and its reconciles are cancelled)
# far inside the replica set's lease duration (15 s; docs/high-availability.md).
DEFAULT_KEEPALIVE_S = 2.0
DEFAULT_KEEPALIVE_TIMEOUT_S = 2.0
# List, Watch and Work responses are capped by bytes on the server (2 MiB by default), but one
# object larger than the cap comes alone; receive what the daemon may send (64 MiB).
DEFAULT_MAX_RECEIVE_BYTES = 64 << 20
DEFAULT_TIMEOUT_S = 30.0


def _read(value: bytes | str | Path | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def add_connection_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The command-line flags of a program that reaches a daemon, as informerctl and the
    examples spell them: ``--target`` (env ``INFORMERD_TARGET``), TLS (``--tls``,
    ``--ca-file``, ``--cert-file``/``--key-file`` for mTLS, ``--server-name``) and a bearer
    token (``--token`` or ``--token-file``, env ``INFORMERD_TOKEN`` / ``INFORMERD_TOKEN_FILE``;
    a projected service-account token is a file). :meth:`ConnectionOptions.from_arguments`
    makes the options of the parsed flags; the group returned takes a program's own."""
    conn = parser.add_argument_group("connection")
    conn.add_argument(
        "--target",
        default=os.environ.get("INFORMERD_TARGET", "127.0.0.1:7470"),
        help="the daemon's gRPC address, host:port or unix:///path "
        "(env INFORMERD_TARGET; default %(default)s)",
    )
    conn.add_argument("--tls", action="store_true", help="use TLS (implied by the file options)")
    conn.add_argument("--ca-file", help="PEM roots to verify the daemon (default: the system's)")
    conn.add_argument("--cert-file", help="client certificate (PEM) for mTLS")
    conn.add_argument("--key-file", help="client key (PEM) for mTLS")
    conn.add_argument("--server-name", help="the name to verify the daemon's certificate against")
    conn.add_argument(
        "--token",
        default=os.environ.get("INFORMERD_TOKEN"),
        help="bearer token (env INFORMERD_TOKEN)",
    )
    conn.add_argument(
        "--token-file",
        default=os.environ.get("INFORMERD_TOKEN_FILE"),
        help="file holding the bearer token, re-read on each connect (env INFORMERD_TOKEN_FILE)",
    )
    return conn


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to connect.

    ``target`` is a gRPC target: ``host:port`` or ``unix:///path``. With ``tls`` (implied by any
    certificate option) the channel uses TLS, verifying the daemon against ``root_certificates``
    (PEM bytes or a file path; the system roots when None); ``client_certificate`` and
    ``client_key`` add mTLS. ``token`` is sent as ``authorization: Bearer <token>`` on every
    call (``token_file`` is re-read on each connect, as projected service-account tokens rotate).
    ``timeout_s`` is every unary call's deadline unless the call gives its own. Every channel
    pings the daemon every ``keepalive_s`` (``keepalive_timeout_s`` for the answer), with or
    without calls, so a dead connection is noticed without waiting for TCP.

    A replica set's leader, which the client reaches at its advertised address when a follower
    names it, gets a channel with these same options (credentials, ``server_name``, token).
    """

    target: str = "127.0.0.1:7470"
    tls: bool = False
    root_certificates: bytes | str | Path | None = None
    client_certificate: bytes | str | Path | None = None
    client_key: bytes | str | Path | None = None
    server_name: str | None = None
    token: str | None = None
    token_file: str | Path | None = None
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES
    max_send_bytes: int = DEFAULT_MAX_RECEIVE_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    extra_channel_options: Sequence[tuple[str, int | str]] = field(default_factory=tuple)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, **options: object) -> ConnectionOptions:
        """The options of the flags :func:`add_connection_arguments` added, parsed into
        ``args``; ``options`` sets the others (``timeout_s=5``, say)."""
        return cls(
            target=args.target,
            tls=args.tls,
            root_certificates=args.ca_file,
            client_certificate=args.cert_file,
            client_key=args.key_file,
            server_name=args.server_name,
            token=args.token,
            token_file=args.token_file,
            **options,  # type: ignore[arg-type]
        )

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("ConnectionOptions.target: empty (want host:port or unix:///path)")
        if self.keepalive_s < 1.0:
            raise ValueError(
                f"ConnectionOptions.keepalive_s: {self.keepalive_s} is below the daemon's "
                "minimum ping interval of 1 s"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"ConnectionOptions.timeout_s: {self.timeout_s} must be positive")
        if (self.client_certificate is None) != (self.client_key is None):
            raise ValueError(
                "ConnectionOptions.client_certificate and client_key: give both or neither"
            )

    @property
    def uses_tls(self) -> bool:
        return self.tls or any(
            v is not None
            for v in (self.root_certificates, self.client_certificate, self.client_key)
        )

    def channel_options(self) -> list[tuple[str, int | str]]:
        options: list[tuple[str, int | str]] = [
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            # gRPC core also times out every ping it sends after this (1 min by default), and
            # that is what ends a connection to a stopped peer: the keepalive timeout alone
            # does not.
            ("grpc.http2.ping_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", self.max_receive_bytes),
            ("grpc.max_send_message_length", self.max_send_bytes),
            # Reconnect quickly after a daemon restart; the SDK adds its own jittered backoff.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 5000),
        ]
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        options.extend(self.extra_channel_options)
        return options

    def metadata(self) -> tuple[tuple[str, str], ...]:
        token = self.token
        if self.token_file is not None:
            token = Path(self.token_file).read_text().strip()
        if token:
            return (("authorization", f"Bearer {token}"),)
        return ()

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.root_certificates),
            private_key=_read(self.client_key),
            certificate_chain=_read(self.client_certificate),
        )

    def aio_channel(self, target: str | None = None) -> grpc.aio.Channel:
        """An asyncio channel to ``target`` (default: :attr:`target`) with these options."""
        target = target or self.target
        if self.uses_tls:
            return grpc.aio.secure_channel(
                target, self.credentials(), options=self.channel_options()
            )
        return grpc.aio.insecure_channel(target, options=self.channel_options())

    def channel(self, target: str | None = None) -> grpc.Channel:
        """A blocking channel to ``target`` (default: :attr:`target`) with these options."""
        target = target or self.target
        if self.uses_tls:
            return grpc.secure_channel(target, self.credentials(), options=self.channel_options())
        return grpc.insecure_channel(target, options=self.channel_options())


@dataclass
class Backoff:
    """Jittered exponential backoff for reconnects ("full jitter": uniform in [0, cap])."""

    initial_s: float = 0.2
    max_s: float = 10.0
    multiplier: float = 2.0
    _attempt: int = 0

    def next(self) -> float:
        cap = min(self.max_s, self.initial_s * (self.multiplier**self._attempt))
        self._attempt += 1
        return random.uniform(cap / 2, cap)

    def reset(self) -> None:
        self._attempt = 0
