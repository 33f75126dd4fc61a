"""The Work stream, low level: leases in, outcomes out, on one ``grpc.aio`` bidi stream.

    stream = WorkStream(client, "cm-hash", max_in_flight=4)
    started = await stream.start()
    while (leases := await stream.receive()) is not None:
        for lease in leases:
            ...
            stream.complete(lease, Outcome.SUCCESS)
    # receive() returns None once the stream ended OK (after drain()), and raises an
    # informerd.errors exception when it broke.

Outcomes are queued and sent together: every outcome completed in one event-loop tick goes in
one ``Outcomes`` message. While the queue has a lease timeout, held leases are heartbeated every
third of it. Refusals (an outcome or heartbeat the daemon did not apply: the key is someone
else's now) are logged, counted in :attr:`WorkStream.refusals` and passed to ``on_refusal``;
they are never retried. :meth:`close` cancels the stream (held keys go back to the queue).

In a replica set the stream opens on the leader: :meth:`start` follows NOT_LEADER answers
(:meth:`informerd.Client.on_leader`). When the stream breaks later, :meth:`receive` raises (a
:class:`informerd.NotLeader` when its replica stopped leading) and the client learns where the
leader is now; a stream never moves: open a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from informerd.errors import (
    Cancelled,
    FailedPrecondition,
    InformerdError,
    error_from_status,
    from_rpc_error,
)
from informerd.queues import validate_priority, validate_queue_name
from informerd.v1 import errors_pb2, work_pb2

if TYPE_CHECKING:
    from informerd.client import Client, Route

Outcome = work_pb2.Outcome
Lease = work_pb2.Lease

_log = logging.getLogger("informerd.work")
_MAX_IN_FLIGHT = 100_000
_MAX_BATCH_BYTES = 64 << 20
# An Outcome's error text is for people; the daemon logs it. Keep messages small.
MAX_ERROR_CHARS = 4096


def validate_count(value: int, argument: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}: want an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{argument}: {value}, want {low} .. {high}")
    return value


def _task_cancelling() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if callable(cancelling) else False


def refusal_reason(refusal: work_pb2.Refusal) -> str:
    """The refusal's reason name (KEY_NOT_HELD, STALE_TOKEN, LEASE_EXPIRED, INVALID_FIELD)."""
    try:
        return errors_pb2.ErrorReason.Name(refusal.reason) if refusal.reason else "UNKNOWN"
    except ValueError:
        return str(refusal.reason)


class WorkStream:
    """One ``Work.Process`` stream on a queue (see the module doc).

    ``max_in_flight`` is the stream's credit (keys held at once), ``max_batch`` the most keys per
    response (0: the credit), ``max_batch_bytes`` the most bytes per response (0: 2 MiB);
    ``object_informer_id`` makes every lease carry the object with its key from that informer.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        *,
        max_in_flight: int,
        max_batch: int = 0,
        worker_name: str = "",
        object_informer_id: str = "",
        max_batch_bytes: int = 0,
        on_refusal: Callable[[work_pb2.Refusal], None] | None = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    ) -> None:
        self._client = client
        self._start = work_pb2.Start(
            queue=validate_queue_name(queue, "queue"),
            max_in_flight=validate_count(max_in_flight, "max_in_flight", 1, _MAX_IN_FLIGHT),
            max_batch=validate_count(max_batch, "max_batch", 0, _MAX_IN_FLIGHT),
            worker_name=worker_name,
            object_informer_id=object_informer_id,
            max_batch_bytes=validate_count(max_batch_bytes, "max_batch_bytes", 0, _MAX_BATCH_BYTES),
        )
        self._on_refusal = on_refusal
        self._log = logger or _log
        self.started: work_pb2.Started | None = None
        #: Refusals received, by reason name (KEY_NOT_HELD, STALE_TOKEN, LEASE_EXPIRED ...).
        self.refusals: Counter[str] = Counter()
        #: Outcome messages sent (each carries every outcome completed in one loop tick).
        self.outcome_messages = 0
        # Leases delivered and not answered, as (key, token): a key whose lease expired may be
        # delivered again while its first reconcile still runs. Expired ones are no longer
        # heartbeated but still answered: an expired lease holds credit until its outcome.
        self._held: set[tuple[str, int]] = set()
        self._expired: set[tuple[str, int]] = set()
        self._pending: list[work_pb2.Outcome] = []
        self._wake = asyncio.Event()
        self._drain_requested = False
        self._drain_sent = False
        self._closing = False
        self._call: grpc.aio.StreamStreamCall[work_pb2.ProcessRequest, work_pb2.ProcessResponse]
        self._route: Route | None = None
        # Start attempts (a follower's NOT_LEADER makes another): only the last one's request
        # iterator sends.
        self._attempts = 0
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_due = False

    @property
    def queue(self) -> str:
        return self._start.queue

    @property
    def epoch(self) -> int:
        """The daemon's epoch (Started.epoch; 0 before :meth:`start`)."""
        return self.started.epoch if self.started else 0

    @property
    def stream_id(self) -> str:
        """The daemon's id of this stream (Started.stream_id; "" before :meth:`start`)."""
        return self.started.stream_id if self.started else ""

    @property
    def address(self) -> str | None:
        """The leader's address the stream runs on; None for the configured target."""
        return self._route.address if self._route is not None else None

    @property
    def lease_timeout_s(self) -> float | None:
        """The queue's lease timeout as the daemon said at start (None: leases do not expire)."""
        if self.started is None or self.started.lease_timeout_ms <= 0:
            return None
        return self.started.lease_timeout_ms / 1000

    @property
    def held(self) -> set[tuple[str, int]]:
        """Leases delivered and not yet answered, as (key, token) (a copy)."""
        return set(self._held)

    async def _requests(self, attempt: int) -> AsyncIterator[work_pb2.ProcessRequest]:
        yield work_pb2.ProcessRequest(start=self._start)
        while True:
            await self._wake.wait()
            if attempt != self._attempts:
                # The call of an earlier start attempt (refused, e.g. NOT_LEADER): grpc may not
                # stop its request iterator; it must not take this stream's outcomes.
                return
            self._wake.clear()
            if self._pending:
                batch, self._pending = self._pending, []
                self.outcome_messages += 1
                yield work_pb2.ProcessRequest(outcomes=work_pb2.Outcomes(outcomes=batch))
            if self._heartbeat_due:
                self._heartbeat_due = False
                live = sorted(self._held - self._expired)
                if live:
                    refs = [work_pb2.LeaseRef(key=k, token=t) for k, t in live]
                    yield work_pb2.ProcessRequest(heartbeat=work_pb2.Heartbeat(leases=refs))
            if self._drain_requested and not self._drain_sent:
                self._drain_sent = True
                yield work_pb2.ProcessRequest(drain=work_pb2.Drain())
            if self._closing:
                return

    async def start(self, timeout_s: float | None = None) -> work_pb2.Started:
        """Opens the stream (on the replica set's leader) and waits for ``Started`` within
        ``timeout_s`` in all (default: the client's deadline). Raises the daemon's error (e.g.
        NotFound for an unknown queue). A stream starts once (``async with`` starts it): a second
        call raises :class:`informerd.FailedPrecondition` (reason ALREADY_STARTED) instead of
        opening another stream that would hold keys nobody reads."""
        if self.started is not None:
            raise FailedPrecondition(
                f"Work stream on {self.queue} is already started (async with starts it; a "
                "stream never restarts: open a new one)",
                reason="ALREADY_STARTED",
            )
        timeout = timeout_s if timeout_s is not None else self._client.options.timeout_s
        started = await self._client.on_leader(self._start_on, timeout)
        if self.lease_timeout_s is not None:
            self._heartbeat_task = asyncio.create_task(
                self._heartbeats(self.lease_timeout_s / 3), name=f"heartbeats {self.queue}"
            )
        return started

    async def _start_on(self, route: Route, timeout_s: float) -> work_pb2.Started:
        self._route = route
        self._attempts += 1
        self._call = route.stubs.work.Process(
            self._requests(self._attempts), metadata=self._client.call_metadata()
        )
        try:
            first = await asyncio.wait_for(self._call.read(), timeout_s)
        except asyncio.TimeoutError:
            self._call.cancel()
            raise InformerdError(
                f"Work stream on {self.queue}: no Started within {timeout_s:.1f} s",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
            ) from None
        except grpc.RpcError as e:
            # Cancelled, so that this attempt's request iterator stops (it shares the outcomes).
            self._call.cancel()
            raise from_rpc_error(e) from None
        if not isinstance(first, work_pb2.ProcessResponse):
            error = await self._end_error("ended before Started")
            self._call.cancel()
            raise error
        if first.WhichOneof("kind") != "started":
            self._call.cancel()
            raise InformerdError(
                f"Work stream on {self.queue}: first response is {first.WhichOneof('kind')}, "
                "not Started"
            )
        self.started = first.started
        return first.started

    async def _end_error(self, what: str) -> InformerdError:
        code = await self._call.code()
        details = await self._call.details()
        trailers = await self._call.trailing_metadata()
        if code == grpc.StatusCode.OK:
            return InformerdError(f"Work stream on {self.queue} {what}", code=code)
        return error_from_status(code, details or what, trailers)

    def _broken(self, error: InformerdError) -> InformerdError:
        """``error`` ended the stream: the client learns where the leader is from it."""
        self._stop_heartbeats()
        if self._route is not None:
            self._client.observe(error, self._route)
        return error

    async def _heartbeats(self, interval_s: float) -> None:
        while not self._closing:
            await asyncio.sleep(interval_s)
            self._heartbeat_due = True
            self._wake.set()

    async def receive(self) -> list[work_pb2.Lease] | None:
        """The next batch of leases; None when the stream ended OK (after :meth:`drain`).
        Raises an :mod:`informerd.errors` exception when the stream broke. Refusals in between
        are handled here (logged, counted, ``on_refusal``)."""
        while True:
            try:
                resp = await self._call.read()
            except grpc.RpcError as e:
                raise self._broken(from_rpc_error(e)) from None
            except asyncio.CancelledError:
                # grpc.aio raises CancelledError from a read of a call cancelled by close();
                # only a cancellation of the reading task itself stays one.
                if not self._closing or _task_cancelling():
                    raise
                raise Cancelled(f"Work stream on {self.queue} closed") from None
            if not isinstance(resp, work_pb2.ProcessResponse):
                self._stop_heartbeats()
                if await self._call.code() == grpc.StatusCode.OK and self._drain_sent:
                    return None
                raise self._broken(await self._end_error("ended by the daemon without a drain"))
            kind = resp.WhichOneof("kind")
            if kind == "leases":
                leases = list(resp.leases.leases)
                for lease in leases:
                    self._held.add((lease.key, lease.token))
                return leases
            if kind == "refusals":
                for refusal in resp.refusals.refusals:
                    self._refused(refusal)

    def _refused(self, refusal: work_pb2.Refusal) -> None:
        reason = refusal_reason(refusal)
        if (refusal.key, refusal.token) in self._held:
            self._expired.add((refusal.key, refusal.token))  # a heartbeat's refusal
        self.refusals[reason] += 1
        self._log.warning(
            "informerd refused the outcome for %s (token %d): %s %s",
            refusal.key,
            refusal.token,
            reason,
            refusal.message,
            extra={"queue": self.queue, "key": refusal.key, "token": refusal.token},
        )
        if self._on_refusal is not None:
            self._on_refusal(refusal)

    def complete(
        self,
        lease: work_pb2.Lease,
        result: work_pb2.Outcome.Result.ValueType,
        *,
        requeue_after_s: float = 0.0,
        error: str = "",
        priority: int | None = None,
    ) -> None:
        """Queues the lease's outcome; everything completed in one loop tick goes in one
        message. A lease this stream does not hold (answered already) raises
        :class:`informerd.FailedPrecondition`. ``priority`` is the one a requeue waits at
        (None: the lease's own)."""
        ref = (lease.key, lease.token)
        if requeue_after_s < 0:
            raise ValueError(f"requeue_after_s: {requeue_after_s} is negative")
        validate_priority(priority)
        try:
            self._held.remove(ref)
        except KeyError:
            raise FailedPrecondition(
                f"{lease.key} (token {lease.token}) is not held by this stream",
                reason="KEY_NOT_HELD",
            ) from None
        if self._expired:
            self._expired.discard(ref)
        if requeue_after_s or error or priority is not None:
            outcome = work_pb2.Outcome(
                key=ref[0],
                token=ref[1],
                result=result,
                requeue_after_ms=int(requeue_after_s * 1000),
                error=error[:MAX_ERROR_CHARS],
                priority=priority,
            )
        else:
            outcome = work_pb2.Outcome(key=ref[0], token=ref[1], result=result)
        self._pending.append(outcome)
        if not self._wake.is_set():
            self._wake.set()

    def drain(self) -> None:
        """Asks the daemon to stop delivering; :meth:`receive` returns None once every held
        lease is answered."""
        self._drain_requested = True
        self._wake.set()

    def _stop_heartbeats(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None

    async def close(self) -> None:
        """Ends the stream now (cancelling it): held keys go back to the queue."""
        self._closing = True
        self._wake.set()
        self._stop_heartbeats()
        if getattr(self, "_call", None) is not None:
            self._call.cancel()
        self._held.clear()
        self._expired.clear()
        self._pending.clear()

    async def __aenter__(self) -> WorkStream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.close()
