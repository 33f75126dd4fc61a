"""Informer.list and Informer.watch against a real daemon on the fake API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import informerd
from informerd.informers import (
    Added,
    Deleted,
    Informer,
    Reconnecting,
    Resnapshot,
    Synced,
    Updated,
    Watch,
    WatchEvent,
    field_index,
    label_index,
)
from informerd.testing import Daemon, FakeApiServer, eventually
from informerd.v1 import informers_pb2

# Generous bounds for a loaded 2-core machine: they catch hangs, not slowness.
HANG_S = 60.0
MIB = 1 << 20


async def next_event(watch: Watch, timeout_s: float = HANG_S) -> WatchEvent:
    return await asyncio.wait_for(watch.__anext__(), timeout_s)


async def read_until_synced(watch: Watch) -> dict[str, Added]:
    """The initial objects up to Synced, by key."""
    initial: dict[str, Added] = {}
    while True:
        event = await next_event(watch)
        if isinstance(event, Synced):
            return initial
        assert isinstance(event, Added), event
        assert event.initial
        initial[event.object.key] = event


async def synced_informer(
    client: informerd.Client, namespace: str, **options: Any
) -> informerd.informers.Informer:
    informer = await client.informers.ensure("v1", "ConfigMap", namespace=namespace, **options)
    await informer.wait_for_sync(timeout_s=HANG_S)
    return informer


async def test_list_filters_by_namespace_selectors_and_indexes(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    for ns in ("list-a", "list-b"):
        fake_apiserver.create_namespace(ns)
    fake_apiserver.put_configmap("list-a", "web-1", {"tier": "front"}, {"list-app": "web"})
    fake_apiserver.put_configmap("list-a", "web-2", {"tier": "front"}, {"list-app": "web"})
    fake_apiserver.put_configmap("list-a", "db-1", {"tier": "back"}, {"list-app": "db"})
    fake_apiserver.put_configmap("list-b", "web-3", {"tier": "front"}, {"list-app": "web"})
    cms = await synced_informer(
        informerd_client,
        "",
        label_selector="list-app",
        indexes={"app": label_index("list-app"), "name": field_index("metadata.name")},
    )

    async def holds_four() -> bool:
        return (await cms.refresh()).state.objects == 4

    await eventually(holds_four, what="the informer holds the four labelled ConfigMaps")

    everything = await cms.list()
    assert sorted(o.key for o in everything) == [
        "list-a/db-1",
        "list-a/web-1",
        "list-a/web-2",
        "list-b/web-3",
    ]
    assert everything.resource_version
    assert [o.key for o in await cms.list(namespace="list-b")] == ["list-b/web-3"]
    assert sorted(o.key for o in await cms.list(label_selector="list-app=web")) == [
        "list-a/web-1",
        "list-a/web-2",
        "list-b/web-3",
    ]
    assert [o.key for o in await cms.list(label_selector="list-app!=web")] == ["list-a/db-1"]
    assert [o.key for o in await cms.list(field_selector="metadata.name=web-2")] == ["list-a/web-2"]
    assert sorted(o.key for o in await cms.list(index=("app", "web"))) == [
        "list-a/web-1",
        "list-a/web-2",
        "list-b/web-3",
    ]
    assert [o.key for o in await cms.list(index=("name", "db-1"))] == ["list-a/db-1"]
    assert sorted(o.key for o in await cms.list(index=("namespace", "list-a"))) == [
        "list-a/db-1",
        "list-a/web-1",
        "list-a/web-2",
    ]
    assert await cms.list(index=("app", "none")) == []
    db = (await cms.list(namespace="list-a", label_selector="list-app=db"))[0]
    assert db.body["data"] == {"tier": "back"}
    assert db.labels == {"list-app": "db"}


async def test_list_batches_stream_bounded_batches_with_one_resource_version(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "list-batches", 25)
    cms = await synced_informer(informerd_client, "list-batches")
    sizes = []
    versions = set()
    async with cms.list_batches(batch_size=10) as batches:
        async for batch in batches:
            sizes.append(len(batch))
            versions.add(batch.resource_version)
    assert sizes == [10, 10, 5]
    assert len(versions) == 1
    assert versions.pop()

    # Leaving early cancels the stream; the next call works.
    async with cms.list_batches(batch_size=1) as batches:
        async for _ in batches:
            break
    assert batches.closed
    assert len(await cms.list(batch_size=7)) == 25


async def test_watch_sees_each_keys_adds_updates_and_deletes_in_order(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("watch-order")
    fake_apiserver.put_configmap("watch-order", "existing", {"v": "0"})
    cms = await synced_informer(informerd_client, "watch-order")
    async with cms.watch(include_old_object=True) as watch:
        initial = await read_until_synced(watch)
        assert list(initial) == ["watch-order/existing"]

        fake_apiserver.put_configmap("watch-order", "a", {"v": "1"})
        fake_apiserver.put_configmap("watch-order", "a", {"v": "2"})
        fake_apiserver.put_configmap("watch-order", "b", {"v": "1"})
        fake_apiserver.delete_configmap("watch-order", "a")
        fake_apiserver.delete_configmap("watch-order", "existing")

        seen = [await next_event(watch) for _ in range(5)]
    changes = [e for e in seen if isinstance(e, (Added, Updated, Deleted))]
    # Each key's events in the order of its changes (across keys the daemon's delta FIFO orders
    # keys by their first pending change, as client-go's does, so only per-key order is kept).
    by_key: dict[str, list[str]] = {}
    for e in changes:
        by_key.setdefault(e.object.key, []).append(e.type.value)
    assert by_key == {
        "watch-order/a": ["ADDED", "UPDATED", "DELETED"],
        "watch-order/b": ["ADDED"],
        "watch-order/existing": ["DELETED"],
    }
    added, updated, deleted = (e for e in changes if e.object.key == "watch-order/a")
    assert isinstance(added, Added)
    assert not added.initial
    assert isinstance(updated, Updated)
    assert updated.object.body["data"] == {"v": "2"}
    assert updated.old_object is not None
    assert updated.old_object.body["data"] == {"v": "1"}
    assert isinstance(deleted, Deleted)
    assert not deleted.tombstone
    assert deleted.object.body["data"] == {"v": "2"}
    assert watch.closed


async def test_a_subscriber_that_falls_behind_gets_resnapshot_then_net_changes(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "watch-resnapshot", 20, object_bytes=8 << 10)
    cms = await synced_informer(informerd_client, "watch-resnapshot")
    async with cms.watch(buffer_size=2, max_batch=1) as watch:
        initial = await read_until_synced(watch)
        assert len(initial) == 20
        # Not reading while 2000 changes happen: far more than the buffer and gRPC's windows.
        fake_apiserver.control(
            "/_fake/churn",
            {"resource": "configmaps", "namespace": "watch-resnapshot", "ops": 2000, "wait": True},
        )
        expected = {o.key: o.resource_version for o in await _settled_list(cms, 20)}
        seen = {k: e.object.resource_version for k, e in initial.items()}
        resnapshots = 0
        while seen != expected:
            event = await next_event(watch)
            if isinstance(event, Resnapshot):
                resnapshots += 1
                assert event.keys > 0
            elif isinstance(event, (Added, Updated)):
                seen[event.object.key] = event.object.resource_version
            elif isinstance(event, Deleted):
                seen.pop(event.object.key, None)
    assert resnapshots >= 1


async def _settled_list(informer: Informer, minimum: int) -> informerd.informers.ObjectList:
    """The informer's list once its cache has caught up with the API server's last write."""
    result = await informer.list()
    await eventually(lambda: _caught_up(informer), what="the daemon's cache caught up")
    result = await informer.list()
    assert len(result) >= minimum
    return result


async def _caught_up(informer: Informer) -> bool:
    # The churn generator updates every object many times; the cache has caught up once two
    # lists a moment apart agree.
    first = {o.key: o.resource_version for o in await informer.list()}
    await asyncio.sleep(0.5)
    second = {o.key: o.resource_version for o in await informer.list()}
    return first == second


async def test_large_objects_come_through_list_and_watch(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "large", 3, object_bytes=MIB + MIB // 4)
    cms = await synced_informer(informerd_client, "large")
    objects = await cms.list()
    assert len(objects) == 3
    assert all(len(o.raw) > MIB for o in objects)
    # One response of all three (over gRPC's default 4 MiB receive limit): the SDK's limit is
    # 64 MiB.
    async with cms.list_batches(max_batch_bytes=64 * MIB) as batches:
        assert [len(b) async for b in batches] == [3]

    async with cms.watch() as watch:
        initial = await read_until_synced(watch)
        assert len(initial) == 3
        assert all(len(e.object.raw) > MIB for e in initial.values())
        fake_apiserver.put_configmap("large", "live", {"payload": "x" * (2 * MIB)})
        event = await next_event(watch)
        assert isinstance(event, Added)
        assert event.object.key == "large/live"
        assert len(event.object.body["data"]["payload"]) == 2 * MIB


async def test_an_unknown_informer_id_is_not_found_for_list_and_watch(
    informerd_client: informerd.Client,
) -> None:
    ghost = Informer(informerd_client, informers_pb2.InformerInfo(id="no-such-informer"))
    with pytest.raises(informerd.NotFound) as e:
        await asyncio.wait_for(ghost.list(), HANG_S)
    assert e.value.reason == "INFORMER_NOT_FOUND"
    with pytest.raises(informerd.NotFound) as e:
        async with ghost.watch() as watch:
            await next_event(watch)
    assert e.value.reason == "INFORMER_NOT_FOUND"


async def test_bad_list_and_watch_arguments_raise_invalid_argument_naming_them(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("bad-input")
    cms = await synced_informer(informerd_client, "bad-input")
    with pytest.raises(informerd.InvalidArgument) as e:
        await asyncio.wait_for(cms.list(index=("no-such-index", "x")), HANG_S)
    assert e.value.field == "index_name"
    assert "no-such-index" in str(e.value) or "index_name" in str(e.value)
    with pytest.raises(informerd.InvalidArgument) as e:
        await cms.list(batch_size=-1)
    assert e.value.field == "batch_size"
    with pytest.raises(informerd.InvalidArgument) as e:
        await cms.list(index=("", "x"))
    assert e.value.field == "index"
    with pytest.raises(informerd.InvalidArgument) as e:
        cms.watch(max_batch_bytes=1 << 40)
    assert e.value.field == "max_batch_bytes"
    with pytest.raises(informerd.InvalidArgument) as e:
        await asyncio.wait_for(cms.list(label_selector="a in ("), HANG_S)
    assert e.value.field == "label_selector"


async def test_a_watch_ends_with_the_error_when_its_informer_is_deleted(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "watch-deleted", 2)
    cms = await synced_informer(informerd_client, "watch-deleted")
    async with cms.watch() as watch:
        await read_until_synced(watch)
        await cms.delete()
        with pytest.raises(informerd.Unavailable) as e:
            await next_event(watch)
    assert e.value.reason == "INFORMER_DELETED"


async def test_a_watch_reconnects_after_a_daemon_restart_and_starts_over(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "watch-restart", 3)
    cms = await synced_informer(informerd_client, "watch-restart")
    async with cms.watch() as watch:
        assert len(await read_until_synced(watch)) == 3
        await asyncio.to_thread(informerd_daemon.restart)
        fake_apiserver.delete_configmap("watch-restart", "seed-0000000")
        event = await next_event(watch)
        assert isinstance(event, Reconnecting)
        assert isinstance(event.cause, informerd.Unavailable)
        # The daemon lost the informer: the watch re-ensured it (same id) and starts over.
        assert sorted(await read_until_synced(watch)) == [
            "watch-restart/seed-0000001",
            "watch-restart/seed-0000002",
        ]
        assert watch.reconnects == 1
        fake_apiserver.put_configmap("watch-restart", "after", {"v": "1"})
        event = await next_event(watch)
        assert isinstance(event, Added)
        assert event.object.key == "watch-restart/after"
