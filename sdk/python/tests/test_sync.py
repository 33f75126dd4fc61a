"""informerd.sync, the blocking facade, against a real daemon (plain test functions, no loop)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import informerd
import informerd.sync
from informerd.objects import KubeObject
from informerd.testing import Daemon, FakeApiServer, wait_until

HANG_S = 60.0


@pytest.fixture
def client(informerd_daemon: Daemon) -> Iterator[informerd.sync.Client]:
    with informerd.sync.Client.connect(informerd_daemon.target, timeout_s=20) as c:
        yield c


def seeded_informer(
    client: informerd.sync.Client, fake: FakeApiServer, namespace: str, count: int
) -> Any:
    """A synced ConfigMap informer of ``namespace`` with ``count`` seeded objects."""
    fake.seed("configmaps", namespace, count)
    cms = client.informers.ensure("v1", "ConfigMap", namespace=namespace)
    cms.wait_for_sync(timeout_s=HANG_S)
    return cms


def test_informer_calls_block_and_return_the_asyncio_apis_results(
    client: informerd.sync.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("sync-informer")
    fake_apiserver.put_configmap("sync-informer", "a", {"k": "1"}, {"app": "web"})
    fake_apiserver.put_configmap("sync-informer", "b", {"k": "2"}, {"app": "db"})
    cms = client.informers.ensure(
        "v1", "ConfigMap", namespace="sync-informer", indexes={"app": informerd.label_index("app")}
    )
    assert cms.id
    info = cms.wait_for_sync(timeout_s=HANG_S)
    assert info.state.synced
    obj = cms.get("sync-informer/a")
    assert isinstance(obj, KubeObject)
    assert obj.body["data"] == {"k": "1"}
    assert cms.get("sync-informer/absent") is None
    listed = cms.list(index=("app", "db"))
    assert [o.key for o in listed] == ["sync-informer/b"]
    assert listed.resource_version
    with cms.list_batches(batch_size=1) as batches:
        assert [len(batch) for batch in batches] == [1, 1]
    assert cms.id in [i.id for i in client.admin.informers()]
    assert [c.name for c in client.admin.clusters()] == ["default"]


def test_errors_come_through_as_the_sdks_exceptions(client: informerd.sync.Client) -> None:
    with pytest.raises(informerd.NotFound) as missing:
        client.informers.get("no-such-informer")
    assert missing.value.reason == "INFORMER_NOT_FOUND"
    with pytest.raises(informerd.InvalidArgument) as invalid:
        client.informers.ensure("v1", "ConfigMap", indexes={"Bad!": informerd.label_index("a")})
    assert invalid.value.field == "spec.indexes[0].name"


def test_a_watch_is_a_blocking_iterator_that_close_ends_from_another_thread(
    client: informerd.sync.Client, fake_apiserver: FakeApiServer
) -> None:
    cms = seeded_informer(client, fake_apiserver, "sync-watch", 2)
    events = cms.watch()
    seen = []
    for event in events:
        seen.append(event)
        if isinstance(event, informerd.Synced):
            break
    assert [type(e).__name__ for e in seen] == ["Added", "Added", "Synced"]

    fake_apiserver.put_configmap("sync-watch", "live", {"v": "1"})
    event = next(events)
    assert isinstance(event, informerd.Added)
    assert event.object.key == "sync-watch/live"

    # A reader blocked in next() ends once another thread closes the stream.
    ended = threading.Event()

    def read_rest() -> None:
        for _ in events:
            pass
        ended.set()

    reader = threading.Thread(target=read_rest, daemon=True)
    reader.start()
    events.close()
    reader.join(HANG_S)
    assert ended.is_set()


def test_a_sync_store_mirrors_and_its_handlers_run(
    client: informerd.sync.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("sync-store")
    fake_apiserver.put_configmap("sync-store", "a", {"node": "n1"})
    cms = client.informers.ensure("v1", "ConfigMap", namespace="sync-store")
    added: list[str] = []
    with informerd.sync.Store(
        cms,
        indexers={"by_node": lambda o: [o.body["data"].get("node", "")]},
        on_add=lambda obj, initial: added.append(obj.key),
    ) as store:
        store.wait_synced(timeout_s=HANG_S)
        assert store.keys() == ["sync-store/a"]
        assert len(store) == 1
        assert "sync-store/a" in store
        fake_apiserver.put_configmap("sync-store", "b", {"node": "n1"})
        wait_until(lambda: len(store) == 2, what="the Store has the new ConfigMap")
        assert [o.key for o in store.by_index("by_node", "n1")] == ["sync-store/a", "sync-store/b"]
        assert list(store) == ["sync-store/a", "sync-store/b"]
        assert added == ["sync-store/a", "sync-store/b"]


def test_a_handler_calling_the_facade_gets_an_error_instead_of_a_deadlock(
    client: informerd.sync.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "sync-deadlock", 1)
    cms = client.informers.ensure("v1", "ConfigMap", namespace="sync-deadlock")
    errors: list[BaseException] = []

    def on_add(obj: KubeObject, initial: bool) -> None:
        try:
            client.admin.clusters()
        except RuntimeError as e:
            errors.append(e)

    with informerd.sync.Store(cms, on_add=on_add) as store:
        store.wait_synced(timeout_s=HANG_S)
    assert len(errors) == 1
    assert "event-loop thread" in str(errors[0])


def test_an_unreachable_daemon_fails_by_the_deadline() -> None:
    with (
        informerd.sync.Client.connect("127.0.0.1:1", timeout_s=2) as unreachable,
        pytest.raises((informerd.Unavailable, informerd.Timeout)),
    ):
        unreachable.admin.clusters()


def test_a_closed_client_refuses_calls(informerd_daemon: Daemon) -> None:
    c = informerd.sync.Client.connect(informerd_daemon.target)
    admin = c.admin
    c.close()
    c.close()  # closing twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        admin.clusters()


def test_a_dropped_watch_iterator_cancels_its_stream(
    client: informerd.sync.Client, fake_apiserver: FakeApiServer
) -> None:
    cms = seeded_informer(client, fake_apiserver, "sync-dropped", 1)
    events = cms.watch()
    assert isinstance(next(events), informerd.Added)
    wait_until(lambda: cms.refresh().state.subscribers == 1, what="the daemon sees the Watch")
    del events
    gc.collect()
    wait_until(
        lambda: cms.refresh().state.subscribers == 0,
        what="the daemon saw the dropped Watch stream end",
    )
