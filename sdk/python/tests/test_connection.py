"""Connection options against real servers: TLS and mTLS to the daemon, the bearer token."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest

import informerd
from informerd.testing import Daemon, FakeApiServer
from informerd.v1 import admin_pb2, admin_pb2_grpc


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str) -> None:
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt"),
        cwd=d,
    )


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr"),
        cwd=d,
    )
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        *("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key"),
        *("-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt"),
        cwd=d,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return Pki(
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "client.crt",
        d / "client.key",
        d / "other-ca.crt",
    )


@pytest.fixture
def mtls_daemon(fake_apiserver: FakeApiServer, pki: Pki, tmp_path: Path) -> Iterator[Daemon]:
    daemon = Daemon.start(
        fake_apiserver.kubeconfig,
        tmp_path,
        extra_args=[
            f"--tls_cert={pki.server_cert}",
            f"--tls_key={pki.server_key}",
            f"--tls_client_ca={pki.ca}",
        ],
    )
    try:
        yield daemon
    finally:
        daemon.close()


async def test_mtls_with_the_right_certificates_connects(mtls_daemon: Daemon, pki: Pki) -> None:
    async with informerd.Client.connect(
        mtls_daemon.target,
        root_certificates=pki.ca,
        client_certificate=pki.client_cert,
        client_key=pki.client_key,
        timeout_s=10,
    ) as client:
        clusters = await client.admin.clusters()
        assert [c.name for c in clusters] == ["default"]


async def test_mtls_refuses_a_client_without_a_certificate_or_trusting_another_ca(
    mtls_daemon: Daemon, pki: Pki
) -> None:
    async with informerd.Client.connect(
        mtls_daemon.target, root_certificates=pki.ca, timeout_s=5
    ) as client:
        with pytest.raises((informerd.Unavailable, informerd.Timeout)):
            await client.admin.clusters()
    async with informerd.Client.connect(
        mtls_daemon.target,
        root_certificates=pki.other_ca,
        client_certificate=pki.client_cert,
        client_key=pki.client_key,
        timeout_s=5,
    ) as client:
        with pytest.raises((informerd.Unavailable, informerd.Timeout)):
            await client.admin.clusters()
    async with informerd.Client.connect(mtls_daemon.target, timeout_s=5) as plaintext:
        with pytest.raises((informerd.Unavailable, informerd.Timeout)):
            await plaintext.admin.clusters()


def test_the_sync_facade_takes_the_same_tls_options(mtls_daemon: Daemon, pki: Pki) -> None:
    with informerd.sync.Client.connect(
        mtls_daemon.target,
        root_certificates=pki.ca,
        client_certificate=pki.client_cert,
        client_key=pki.client_key,
        timeout_s=10,
    ) as client:
        assert [c.name for c in client.admin.clusters()] == ["default"]


class _RecordingAdmin(admin_pb2_grpc.AdminServicer):
    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    async def ListClusters(
        self,
        request: admin_pb2.ListClustersRequest,
        context: grpc.aio.ServicerContext[
            admin_pb2.ListClustersRequest, admin_pb2.ListClustersResponse
        ],
    ) -> admin_pb2.ListClustersResponse:
        md = context.invocation_metadata() or ()
        self.metadata.append({k: str(v) for k, v in md})
        return admin_pb2.ListClustersResponse()

    async def ListInformers(
        self,
        request: admin_pb2.ListInformersRequest,
        context: grpc.aio.ServicerContext[
            admin_pb2.ListInformersRequest, admin_pb2.ListInformersResponse
        ],
    ) -> admin_pb2.ListInformersResponse:
        return admin_pb2.ListInformersResponse()

    async def ListQueues(
        self,
        request: admin_pb2.ListQueuesRequest,
        context: grpc.aio.ServicerContext[
            admin_pb2.ListQueuesRequest, admin_pb2.ListQueuesResponse
        ],
    ) -> admin_pb2.ListQueuesResponse:
        return admin_pb2.ListQueuesResponse()

    async def GetReplica(
        self,
        request: admin_pb2.GetReplicaRequest,
        context: grpc.aio.ServicerContext[admin_pb2.GetReplicaRequest, admin_pb2.ReplicaInfo],
    ) -> admin_pb2.ReplicaInfo:
        return admin_pb2.ReplicaInfo()


async def test_the_token_goes_on_every_call_and_a_token_file_is_reread(tmp_path: Path) -> None:
    server = grpc.aio.server()
    recorder = _RecordingAdmin()
    admin_pb2_grpc.add_AdminServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with informerd.Client.connect(f"127.0.0.1:{port}", token="s3cret") as client:
            await client.admin.clusters()
        token_file = tmp_path / "token"
        token_file.write_text("first\n")
        async with informerd.Client.connect(f"127.0.0.1:{port}", token_file=token_file) as client:
            await client.admin.clusters()
            token_file.write_text("rotated\n")
            await client.admin.clusters()
    finally:
        await server.stop(None)
    assert [m.get("authorization") for m in recorder.metadata] == [
        "Bearer s3cret",
        "Bearer first",
        "Bearer rotated",
    ]
