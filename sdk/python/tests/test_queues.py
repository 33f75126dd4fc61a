"""The queue API against a real daemon on the fake API server."""

from __future__ import annotations

import asyncio
import time

import pytest

import informerd
from informerd.queues import (
    annotations_changed,
    bucket,
    default_controller,
    exponential,
    fast_slow,
    fields_changed,
    generation_changed,
    index_source,
    labels_changed,
    max_of,
    object_source,
    owner_source,
    queue_spec,
)
from informerd.testing import Daemon, FakeApiServer, eventually
from informerd.v1 import queues_pb2


def test_equal_intents_give_equal_specs() -> None:
    a = queue_spec(
        "q",
        [
            object_source("inf-a", predicates=[labels_changed(), generation_changed()]),
            owner_source("inf-b", "ReplicaSet", group="apps"),
        ],
        rate_limiter=max_of(bucket(10, 100), exponential(5, 1000)),
        resync_period_s=60,
    )
    b = queue_spec(
        "q",
        [
            owner_source("inf-b", "ReplicaSet", group="apps"),
            object_source("inf-a", predicates=[generation_changed(), labels_changed()]),
            object_source("inf-a", predicates=[generation_changed(), labels_changed()]),
        ],
        rate_limiter=max_of(exponential(5, 1000), bucket(10, 100)),
        resync_period_s=60.0,
    )
    assert a == b
    assert a.resync_period_ms == 60_000
    assert fields_changed("b", "a", "b") == fields_changed("a", "b")
    # The default limiter, given or not, is spelled out as the daemon reports it.
    assert queue_spec("q", rate_limiter=default_controller()) == queue_spec("q")


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="name"):
        queue_spec("Bad_Name")
    with pytest.raises(ValueError, match="resync_period_s"):
        queue_spec("q", resync_period_s=0.5)
    with pytest.raises(ValueError, match="lease_timeout_s"):
        queue_spec("q", lease_timeout_s=100_000)
    with pytest.raises(TypeError, match=r"sources\[0\]"):
        queue_spec("q", ["not a source"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="predicates"):
        object_source("inf", predicates=["generation"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="kind"):
        owner_source("inf", "")
    with pytest.raises(ValueError, match="value_from"):
        index_source("inf", index_informer="other", index_name="x", value_from="uid")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fields_changed"):
        fields_changed()
    with pytest.raises(ValueError, match="max_delay_ms"):
        exponential(100, 10)
    with pytest.raises(ValueError, match="qps"):
        bucket(0, 1)
    with pytest.raises(ValueError, match="max_fast_attempts"):
        fast_slow(1, 2, -1)
    with pytest.raises(TypeError, match="informer"):
        object_source(42)  # type: ignore[arg-type]


async def test_create_is_idempotent_and_a_different_spec_conflicts(
    informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.seed("configmaps", "q-create", 5)
    cms = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="q-create")
    await cms.wait_for_sync(timeout_s=30)
    spec = queue_spec(
        "q-create",
        [object_source(cms, predicates=[annotations_changed(), fields_changed("data")])],
        rate_limiter=fast_slow(5, 1000, 3),
    )
    info = await informerd_client.queues.create(spec)
    assert info.spec.name == "q-create"
    again = queue_spec(
        "q-create",
        [object_source(cms.id, predicates=[fields_changed("data"), annotations_changed()])],
        rate_limiter=fast_slow(5, 1000, 3),
    )
    await informerd_client.queues.create(again)
    with pytest.raises(informerd.FailedPrecondition) as e:
        await informerd_client.queues.create(queue_spec("q-create", [object_source(cms)]))
    assert e.value.reason == "QUEUE_EXISTS_WITH_OTHER_SPEC"

    # The object source enqueues every cached object.
    async def enqueued() -> bool:
        return await informerd_client.queues.len("q-create") == 5

    await eventually(enqueued, "the source enqueued the 5 objects")
    # update changes the spec in place; allow_missing creates.
    updated = await informerd_client.queues.update(queue_spec("q-create", [object_source(cms)]))
    assert updated.spec.rate_limiter == default_controller()
    assert updated.spec == queue_spec("q-create", [object_source(cms)])
    with pytest.raises(informerd.NotFound):
        await informerd_client.queues.update(queue_spec("q-missing"))
    await informerd_client.queues.update(queue_spec("q-missing"), allow_missing=True)
    assert (await informerd_client.queues.get("q-missing")).spec.name == "q-missing"
    await informerd_client.queues.delete("q-missing")
    with pytest.raises(informerd.NotFound):
        await informerd_client.queues.get("q-missing")


async def test_client_side_adds_retries_and_shutdown(informerd_client: informerd.Client) -> None:
    q = informerd_client.queues
    await q.create(queue_spec("q-adds", rate_limiter=exponential(1000, 60_000)))
    await q.add("q-adds", ["a", "b", "a"])
    assert await q.len("q-adds") == 2
    await q.add_after("q-adds", "c", 3600)
    assert await q.len("q-adds") == 2
    state = (await q.get("q-adds")).state
    assert state.delayed == 1
    await q.add_rate_limited("q-adds", "d")
    await q.add_rate_limited("q-adds", "d")
    assert await q.num_requeues("q-adds", "d") == 2
    await q.forget("q-adds", "d")
    assert await q.num_requeues("q-adds", "d") == 0
    with pytest.raises(ValueError, match="keys"):
        await q.add("q-adds", [""])
    with pytest.raises(ValueError, match="queue"):
        await q.add("Q!", "a")
    await q.shut_down("q-adds", drain=True, timeout_s=10)
    assert (await q.get("q-adds")).state.shutting_down


async def test_owner_and_index_sources_are_accepted_and_unknown_informers_fail(
    informerd_client: informerd.Client,
) -> None:
    deps = await informerd_client.informers.ensure("apps/v1", "Deployment", namespace="q-src")
    pods = await informerd_client.informers.ensure("v1", "Pod", namespace="q-src")
    cms = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="q-src")
    spec = queue_spec(
        "q-src",
        [
            object_source(deps, predicates=[generation_changed()]),
            owner_source(pods, "Deployment", group="apps", all_owners=True),
            index_source(cms, index_informer=deps, index_name="none", value_from="name"),
        ],
    )
    with pytest.raises(informerd.InformerdError):
        # The Deployment informer has no index "none".
        await informerd_client.queues.create(spec)
    with pytest.raises(informerd.NotFound) as e:
        await informerd_client.queues.create(
            queue_spec("q-src2", [object_source("no-such-informer")])
        )
    assert e.value.reason == "INFORMER_NOT_FOUND"
    ok = queue_spec(
        "q-src3",
        [object_source(deps), owner_source(pods, "Deployment", group="apps")],
        lease_timeout_s=30,
    )
    info = await informerd_client.queues.create(ok)
    assert info.spec.lease_timeout_ms == 30_000
    assert len(info.spec.sources) == 2


async def test_remembered_specs_are_recreated_after_a_restart(
    informerd_daemon: Daemon, informerd_client: informerd.Client
) -> None:
    await informerd_client.queues.create(queue_spec("q-restart", resync_period_s=5))
    informerd_daemon.restart()
    deadline = time.monotonic() + 30
    while True:
        try:
            await informerd_client.reensure()
            break
        except (informerd.Unavailable, informerd.Timeout):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
    info = await informerd_client.queues.get("q-restart")
    assert info.spec.resync_period_ms == 5000
    assert isinstance(info, queues_pb2.QueueInfo)
