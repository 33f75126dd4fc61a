"""The Work stream, low level, against a real daemon."""

from __future__ import annotations

import asyncio

import pytest

import informerd
from informerd.queues import exponential, queue_spec
from informerd.testing import eventually, queue_idle
from informerd.v1 import work_pb2
from informerd.work import Outcome, WorkStream


async def receive_all(stream: WorkStream, n: int) -> list[work_pb2.Lease]:
    got: list[work_pb2.Lease] = []
    while len(got) < n:
        batch = await asyncio.wait_for(stream.receive(), 30)
        assert batch is not None
        got.extend(batch)
    return got


async def test_unknown_queue_fails_at_start(informerd_client: informerd.Client) -> None:
    stream = WorkStream(informerd_client, "no-such-queue", max_in_flight=1)
    with pytest.raises(informerd.NotFound) as e:
        await stream.start()
    assert e.value.reason == "QUEUE_NOT_FOUND"
    await stream.close()
    with pytest.raises(ValueError, match="max_in_flight"):
        WorkStream(informerd_client, "q", max_in_flight=0)


async def test_a_stream_starts_once(informerd_client: informerd.Client) -> None:
    await informerd_client.queues.create(queue_spec("w-once"))
    async with WorkStream(informerd_client, "w-once", max_in_flight=1) as stream:
        with pytest.raises(informerd.FailedPrecondition) as e:
            await stream.start()
        assert e.value.reason == "ALREADY_STARTED"
        info = next(
            d for d in await informerd_client.admin.queues() if d.queue.spec.name == "w-once"
        )
        assert len(info.workers) == 1


async def test_leases_are_answered_in_one_message_per_tick(
    informerd_client: informerd.Client,
) -> None:
    q = informerd_client.queues
    await q.create(queue_spec("w-batch"))
    keys = [f"k{i}" for i in range(5)]
    await q.add("w-batch", keys)
    stream = WorkStream(informerd_client, "w-batch", max_in_flight=10, worker_name="t")
    started = await stream.start()
    assert started.epoch > 0
    assert stream.lease_timeout_s is None
    leases = await receive_all(stream, 5)
    assert sorted(lease.key for lease in leases) == keys
    assert all(lease.token > started.epoch for lease in leases)
    for lease in leases:
        stream.complete(lease, Outcome.SUCCESS)
    with pytest.raises(informerd.FailedPrecondition):
        stream.complete(leases[0], Outcome.SUCCESS)

    async def done() -> bool:
        return (await q.get("w-batch")).state.in_flight == 0

    await eventually(done, "outcomes applied")
    assert stream.outcome_messages == 1
    assert not stream.refusals
    await stream.close()


async def test_retry_counts_and_drain(informerd_client: informerd.Client) -> None:
    q = informerd_client.queues
    await q.create(queue_spec("w-drain", rate_limiter=exponential(5, 20)))
    await q.add("w-drain", "a")
    stream = WorkStream(informerd_client, "w-drain", max_in_flight=1)
    await stream.start()
    for expected in range(3):
        (lease,) = await receive_all(stream, 1)
        assert lease.requeues == expected
        stream.complete(lease, Outcome.RETRY, error="boom")
    (lease,) = await receive_all(stream, 1)
    stream.drain()
    await asyncio.sleep(0)
    stream.complete(lease, Outcome.SUCCESS)
    assert await asyncio.wait_for(stream.receive(), 30) is None
    assert await q.num_requeues("w-drain", "a") == 0
    await stream.close()


async def test_heartbeats_keep_leases_and_expired_outcomes_are_refused(
    informerd_client: informerd.Client,
) -> None:
    q = informerd_client.queues
    await q.create(queue_spec("w-lease", lease_timeout_s=1))
    await q.add("w-lease", ["held", "dropped"])
    stream = WorkStream(informerd_client, "w-lease", max_in_flight=1)
    await stream.start()
    assert stream.lease_timeout_s == 1.0
    (lease,) = await receive_all(stream, 1)
    await asyncio.sleep(2.5)  # past the timeout: heartbeats every third of it keep the lease
    stream.complete(lease, Outcome.SUCCESS)
    (second,) = await receive_all(stream, 1)
    assert (await q.get("w-lease")).state.expired_leases == 0
    # Without heartbeats the lease expires. A heartbeat then is refused; the lease is no longer
    # heartbeated but still answered (an expired lease holds credit until its outcome), and that
    # late outcome is refused too, never retried.
    stream._stop_heartbeats()

    async def expired() -> bool:
        return (await q.get("w-lease")).state.expired_leases >= 1

    await eventually(expired, "the unheartbeated lease expired")
    refused: list[work_pb2.Refusal] = []
    stream._on_refusal = refused.append
    receiving = asyncio.create_task(stream.receive())
    stream._heartbeat_due = True
    stream._wake.set()
    await eventually(lambda: stream.refusals["LEASE_EXPIRED"] == 1, "the heartbeat refused")
    assert (second.key, second.token) in stream.held
    stream.complete(second, Outcome.SUCCESS)
    # The refusal of the outcome frees the credit: the expired key comes back to this stream.
    (again,) = await asyncio.wait_for(receiving, 30) or []
    assert again.key == second.key
    assert again.token > second.token
    stream.complete(again, Outcome.SUCCESS)
    receiving = asyncio.create_task(stream.receive())  # reads the refusal if it came after
    await eventually(lambda: stream.refusals["LEASE_EXPIRED"] == 2, "the outcome refused")
    assert [r.key for r in refused] == [second.key, second.key]
    await eventually(lambda: queue_idle(informerd_client, "w-lease"), "the queue idle")
    receiving.cancel()
    await stream.close()


async def test_closing_a_stream_gives_its_keys_to_the_next(
    informerd_client: informerd.Client,
) -> None:
    q = informerd_client.queues
    await q.create(queue_spec("w-close"))
    await q.add("w-close", ["x", "y"])
    first = WorkStream(informerd_client, "w-close", max_in_flight=2)
    await first.start()
    held = await receive_all(first, 2)
    await first.close()
    second = WorkStream(informerd_client, "w-close", max_in_flight=2)
    await second.start()
    again = await receive_all(second, 2)
    assert sorted(x.key for x in again) == sorted(x.key for x in held)
    assert min(x.token for x in again) > max(x.token for x in held)
    await second.close()
