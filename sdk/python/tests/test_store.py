"""Store: a local mirror of one informer, against a real daemon on the fake API server."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from typing import Any

import pytest

import informerd
from informerd.informers import Informer
from informerd.objects import KubeObject
from informerd.store import Store
from informerd.testing import Daemon, FakeApiServer, eventually

HANG_S = 60.0
SEED_BUCKET = "fake.informerd.io/bucket"


@dataclass
class Recorder:
    """Event handlers that keep what they were told: a mirror built from the handlers alone
    and the calls in order."""

    mirror: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, bool]] = field(default_factory=list)

    def on_add(self, obj: KubeObject, initial: bool) -> None:
        assert obj.key not in self.mirror, f"on_add of {obj.key}, which the handlers hold"
        self.mirror[obj.key] = obj.resource_version
        self.calls.append(("add", obj.key, initial))

    async def on_update(self, old: KubeObject, new: KubeObject) -> None:
        assert self.mirror.get(old.key) == old.resource_version
        assert old.resource_version != new.resource_version
        self.mirror[new.key] = new.resource_version
        self.calls.append(("update", new.key, False))

    def on_delete(self, obj: KubeObject, tombstone: bool) -> None:
        assert obj.key in self.mirror, f"on_delete of {obj.key}, which the handlers never had"
        del self.mirror[obj.key]
        self.calls.append(("delete", obj.key, tombstone))

    def store(self, informer: Informer, **options: Any) -> Store:
        """A Store of ``informer`` that tells this recorder."""
        return Store(
            informer,
            on_add=self.on_add,
            on_update=self.on_update,
            on_delete=self.on_delete,
            **options,
        )


def versions(store: Store) -> dict[str, str]:
    return {obj.key: obj.resource_version for obj in store.list()}


async def daemon_versions(informer: Informer) -> dict[str, str]:
    return {o.key: o.resource_version for o in await informer.list()}


async def converged(store: Store, informer: Informer, recorder: Recorder | None = None) -> bool:
    """The Store (and the handlers' mirror) hold exactly what the daemon's cache holds."""
    try:
        expected = await daemon_versions(informer)
    except (informerd.NotFound, informerd.Unavailable):
        return False  # the daemon restarts, or the Store has not re-ensured the informer yet
    if versions(store) != expected:
        return False
    return recorder is None or recorder.mirror == expected


async def ensure_synced(client: informerd.Client, namespace: str) -> Informer:
    informer = await client.informers.ensure("v1", "ConfigMap", namespace=namespace)
    await informer.wait_for_sync(timeout_s=HANG_S)
    return informer


async def test_a_store_mirrors_reads_indexes_and_tells_its_handlers(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    ns = "store-basic"
    fake_apiserver.create_namespace(ns)
    fake_apiserver.put_configmap(ns, "a", {"node": "n1"}, {"app": "web"})
    fake_apiserver.put_configmap(ns, "b", {"node": "n2"}, {"app": "web"})
    fake_apiserver.put_configmap(ns, "c", {"node": "n1"}, {"app": "db"})
    cms = await ensure_synced(informerd_client, ns)
    recorder = Recorder()
    async with recorder.store(
        cms,
        indexers={
            "by_node": lambda o: [o.body["data"].get("node", "")],
            "by_app": lambda o: [o.labels.get("app", "")],
        },
    ) as store:
        await store.wait_synced(timeout_s=HANG_S)
        assert store.synced
        assert store.keys() == [f"{ns}/a", f"{ns}/b", f"{ns}/c"]
        assert len(store) == 3
        assert f"{ns}/a" in store
        a = store.get(f"{ns}/a")
        assert a is not None
        assert a.body["data"] == {"node": "n1"}
        # Readers get their own wrapper: a change to one's body is not the Store's.
        a.body["data"]["node"] = "changed"
        again = store.get(f"{ns}/a")
        assert again is not None
        assert again.body["data"] == {"node": "n1"}
        assert store.get(f"{ns}/absent") is None
        assert [o.key for o in store.by_index("by_node", "n1")] == [f"{ns}/a", f"{ns}/c"]
        assert store.index_keys("by_app", "web") == [f"{ns}/a", f"{ns}/b"]
        assert store.index_values("by_node") == ["n1", "n2"]
        assert [o.key for o in store.by_index("namespace", ns)] == store.keys()
        assert [o.key for o in store.list(namespace=ns, label_selector="app in (db,x)")] == [
            f"{ns}/c"
        ]
        assert store.list(namespace="elsewhere") == []
        assert [o.key for o in store.list(predicate=lambda o: o.name != "a")] == [
            f"{ns}/b",
            f"{ns}/c",
        ]
        assert sorted(recorder.calls) == [("add", f"{ns}/{n}", True) for n in "abc"]

        recorder.calls.clear()
        fake_apiserver.put_configmap(ns, "d", {"node": "n3"})
        fake_apiserver.put_configmap(ns, "a", {"node": "n2"}, {"app": "web"})
        fake_apiserver.delete_configmap(ns, "c")
        await eventually(lambda: len(recorder.calls) == 3, what="three handler calls")
        assert recorder.calls == [
            ("add", f"{ns}/d", False),
            ("update", f"{ns}/a", False),
            ("delete", f"{ns}/c", False),
        ]
        assert store.keys() == [f"{ns}/a", f"{ns}/b", f"{ns}/d"]
        assert store.index_keys("by_node", "n1") == []
        assert store.index_keys("by_node", "n2") == [f"{ns}/a", f"{ns}/b"]
        assert store.index_values("by_node") == ["n2", "n3"]
        assert await converged(store, cms, recorder)


async def test_a_store_that_falls_behind_converges_through_resnapshot(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    ns = "store-resnapshot"
    fake_apiserver.seed("configmaps", ns, 50, object_bytes=4 << 10)
    cms = await ensure_synced(informerd_client, ns)
    recorder = Recorder()
    async with recorder.store(
        cms,
        buffer_size=1,
        max_batch=1,
        indexers={"bucket": lambda o: [o.labels.get(SEED_BUCKET, "")]},
    ) as store:
        await store.wait_synced(timeout_s=HANG_S)
        # The churn answers when done and blocks this event loop meanwhile: the Store reads
        # nothing while thousands of creates, updates and deletes happen.
        fake_apiserver.control(
            "/_fake/churn",
            {
                "resource": "configmaps",
                "namespace": ns,
                "ops": 3000,
                "creates": 2,
                "updates": 6,
                "deletes": 2,
                "wait": True,
            },
        )
        await eventually(
            lambda: converged(store, cms, recorder),
            timeout_s=120,
            what="the Store and its handlers hold the daemon's objects",
        )
        assert store.resnapshots >= 1
        # The indexes followed too.
        by_bucket = {obj.key: obj.labels.get(SEED_BUCKET, "") for obj in store.list()}
        for value in store.index_values("bucket"):
            assert all(by_bucket[k] == value for k in store.index_keys("bucket", value))
        assert sum(len(store.index_keys("bucket", v)) for v in store.index_values("bucket")) == (
            len(store)
        )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_store_converges_across_a_daemon_restart(
    sig: signal.Signals,
    informerd_daemon: Daemon,
    informerd_client: informerd.Client,
    fake_apiserver: FakeApiServer,
) -> None:
    ns = f"store-restart-{sig.name.lower()}"
    fake_apiserver.seed("configmaps", ns, 10)
    cms = await ensure_synced(informerd_client, ns)
    recorder = Recorder()
    async with recorder.store(cms) as store:
        await store.wait_synced(timeout_s=HANG_S)
        assert len(store) == 10
        await asyncio.to_thread(informerd_daemon.stop, sig)
        # While the daemon is down: two deleted, one changed, one created.
        fake_apiserver.delete_configmap(ns, "seed-0000003")
        fake_apiserver.delete_configmap(ns, "seed-0000007")
        fake_apiserver.put_configmap(ns, "seed-0000001", {"changed": "yes"})
        fake_apiserver.put_configmap(ns, "new", {"v": "1"})
        await asyncio.to_thread(informerd_daemon.restart)
        # The daemon lost the informer; the Store's stream re-ensured it.
        await eventually(
            lambda: converged(store, cms, recorder),
            what="the Store holds the restarted daemon's objects",
        )
        assert f"{ns}/seed-0000003" not in store
        assert f"{ns}/new" in store
        assert store.reconnects >= 1
        assert ("delete", f"{ns}/seed-0000003", True) in recorder.calls
        assert ("delete", f"{ns}/seed-0000007", True) in recorder.calls
        assert ("update", f"{ns}/seed-0000001", False) in recorder.calls
        assert ("add", f"{ns}/new", True) in recorder.calls
        changed = store.get(f"{ns}/seed-0000001")
        assert changed is not None
        assert changed.body["data"] == {"changed": "yes"}


async def test_a_stopped_store_started_again_catches_up(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    ns = "store-stop-start"
    fake_apiserver.seed("configmaps", ns, 3)
    cms = await ensure_synced(informerd_client, ns)
    recorder = Recorder()
    store = recorder.store(cms)
    await store.start()
    await store.wait_synced(timeout_s=HANG_S)
    await store.stop()
    fake_apiserver.delete_configmap(ns, "seed-0000000")
    fake_apiserver.put_configmap(ns, "new", {"v": "1"})
    await eventually(lambda: _holds(cms, "new"), what="the daemon's cache has the new object")
    assert len(store) == 3  # stopped: it still shows what it had
    async with store:
        await eventually(lambda: converged(store, cms, recorder), what="the Store caught up")
    assert ("delete", f"{ns}/seed-0000000", True) in recorder.calls
    assert ("add", f"{ns}/new", True) in recorder.calls


async def _holds(informer: Informer, name: str) -> bool:
    return await informer.get(f"{informer.spec.namespace}/{name}") is not None


async def test_a_deletion_the_daemon_missed_reaches_the_store_as_a_tombstone(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    ns = "store-tombstone"
    fake_apiserver.seed("configmaps", ns, 3)
    cms = await ensure_synced(informerd_client, ns)
    recorder = Recorder()
    scope = {"resource": "configmaps", "namespace": ns}

    def armed() -> list[object]:
        faults = fake_apiserver.request("GET", "/_fake/faults")
        return [f for f in faults or [] if isinstance(f, dict) and f.get("namespace") == ns]

    async with recorder.store(cms) as store:
        await store.wait_synced(timeout_s=HANG_S)
        # The daemon's current watch of the namespace is ended; its next one sees nothing for
        # 10 s (a long margin for the two requests below), then ends.
        fake_apiserver.control(
            "/_fake/faults", {"type": "stall", "verb": "watch", "durationMs": 10000, **scope}
        )
        fake_apiserver.control("/_fake/faults", {"type": "close-watches", **scope})
        await eventually(lambda: not armed(), what="the daemon watches again (stalled)")
        # A deletion the stalled watch misses; the watch after it is answered 410 Gone, so the
        # daemon relists and finds the object gone: a tombstone.
        fake_apiserver.delete_configmap(ns, "seed-0000001")
        fake_apiserver.control("/_fake/faults", {"type": "gone", "verb": "watch", **scope})
        await eventually(
            lambda: f"{ns}/seed-0000001" not in store, what="the Store lost the deleted object"
        )
        assert await converged(store, cms, recorder)
    assert ("delete", f"{ns}/seed-0000001", True) in recorder.calls
    assert store.keys() == [f"{ns}/seed-0000000", f"{ns}/seed-0000002"]


async def test_a_store_whose_informer_is_deleted_reports_the_error(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "store-deleted", 2)
    cms = await ensure_synced(informerd_client, "store-deleted")
    async with Store(cms) as store:
        await store.wait_synced(timeout_s=HANG_S)
        await cms.delete()
        await eventually(lambda: store.error is not None, what="the Store's stream ended")
        assert isinstance(store.error, informerd.Unavailable)
        assert store.error.reason == "INFORMER_DELETED"
        assert len(store) == 2  # what it held stays readable


async def test_a_store_of_an_unknown_informer_fails_wait_synced_with_not_found(
    informerd_client: informerd.Client,
) -> None:
    from informerd.v1 import informers_pb2

    ghost = Informer(informerd_client, informers_pb2.InformerInfo(id="no-such-informer"))
    async with Store(ghost) as store:
        with pytest.raises(informerd.NotFound) as e:
            await store.wait_synced(timeout_s=HANG_S)
    assert e.value.reason == "INFORMER_NOT_FOUND"


async def test_bad_store_arguments_raise_invalid_argument_naming_them(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("store-bad")
    cms = await ensure_synced(informerd_client, "store-bad")
    with pytest.raises(informerd.InvalidArgument) as e:
        Store(cms, indexers={"namespace": lambda o: [o.namespace]})
    assert e.value.field == "indexers['namespace']"
    with pytest.raises(informerd.InvalidArgument) as e:
        Store(cms, buffer_size=-1)
    assert e.value.field == "buffer_size"
    async with Store(cms) as store:
        await store.wait_synced(timeout_s=HANG_S)
        with pytest.raises(informerd.InvalidArgument) as e:
            store.by_index("by_node", "n1")
        assert e.value.field == "index"
        with pytest.raises(informerd.InvalidArgument) as e:
            store.list(label_selector="app in (a")
        assert e.value.field == "label_selector"


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("tier in (front, edge)", {"tier": "edge"}, True),
        ("tier in (front,edge)", {}, False),
        ("tier notin (front,edge)", {}, True),
        ("tier notin (front,edge)", {"tier": "front"}, False),
        ("app", {"app": ""}, True),
        ("app=", {"app": ""}, True),
        ("app=", {}, False),
        ("!app", {"app": ""}, False),
        (
            "example.com/app=web,!canary,tier in (a,b)",
            {"example.com/app": "web", "tier": "b"},
            True,
        ),
        ("example.com/app=web,!canary", {"example.com/app": "web", "canary": "1"}, False),
    ],
)
def test_label_selectors_match_as_kubernetes_does(
    selector: str, labels: dict[str, str], matches: bool
) -> None:
    assert informerd.label_matcher(selector)(labels) is matches


@pytest.mark.parametrize("selector", ["app in (a", "=web", "app in (a b)", "a,,b", "x y"])
def test_bad_label_selectors_raise_invalid_argument(selector: str) -> None:
    with pytest.raises(informerd.InvalidArgument) as e:
        informerd.label_matcher(selector)
    assert e.value.field == "label_selector"
