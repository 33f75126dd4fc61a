"""The client layer against a real daemon: deadlines, errors from the server's details."""

from __future__ import annotations

import time

import pytest

import informerd
from informerd.testing import Daemon, FakeApiServer
from informerd.v1 import informers_pb2


async def test_admin_lists_the_daemons_cluster(informerd_client: informerd.Client) -> None:
    clusters = await informerd_client.admin.clusters()
    assert [c.name for c in clusters] == ["default"]
    assert clusters[0].is_default


async def test_an_invalid_spec_raises_invalid_argument_naming_the_field(
    informerd_client: informerd.Client,
) -> None:
    request = informers_pb2.EnsureInformerRequest(
        spec=informers_pb2.InformerSpec(
            api_version="v1",
            kind="ConfigMap",
            indexes=[informers_pb2.IndexSpec(name="Bad Name!", label_key="app")],
        )
    )
    with pytest.raises(informerd.InvalidArgument) as e:
        await informerd_client.unary(informerd_client.stubs.informers.EnsureInformer, request)
    assert e.value.reason == "INVALID_FIELD"
    assert e.value.field == "spec.indexes[0].name"
    assert "spec.indexes[0].name" in str(e.value)


async def test_an_unknown_kind_raises_not_found_with_the_reason(
    informerd_client: informerd.Client,
) -> None:
    request = informers_pb2.EnsureInformerRequest(
        spec=informers_pb2.InformerSpec(api_version="v1", kind="ConfigMapp")
    )
    with pytest.raises(informerd.NotFound) as e:
        await informerd_client.unary(informerd_client.stubs.informers.EnsureInformer, request)
    assert e.value.reason == "RESOURCE_NOT_FOUND"
    assert e.value.metadata.get("kind") == "ConfigMapp"


async def test_a_wrong_target_fails_within_the_deadline_as_unavailable_or_timeout(
    informerd_daemon: Daemon,
) -> None:
    client = informerd.Client.connect("127.0.0.1:1", timeout_s=2)
    started = time.monotonic()
    with pytest.raises((informerd.Unavailable, informerd.Timeout)):
        await client.admin.clusters()
    assert time.monotonic() - started < 10
    await client.close()


def test_connection_options_reject_bad_values_naming_them() -> None:
    with pytest.raises(ValueError, match="keepalive_s"):
        informerd.ConnectionOptions(keepalive_s=0.1)
    with pytest.raises(ValueError, match="client_certificate and client_key"):
        informerd.ConnectionOptions(client_certificate=b"x")
    with pytest.raises(ValueError, match="target"):
        informerd.ConnectionOptions(target="")


async def test_an_informer_is_ensured_synced_and_read(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "client-read", 3)
    cms = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="client-read")
    again = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="client-read")
    assert again.id == cms.id
    info = await cms.wait_for_sync(timeout_s=30)
    assert info.state.synced
    assert info.state.objects == 3
    obj = await cms.get("client-read/seed-0000001")
    assert obj is not None
    assert obj.name == "seed-0000001"
    assert obj.body["metadata"]["namespace"] == "client-read"
    assert await cms.get("client-read/absent") is None
