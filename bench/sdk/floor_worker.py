"""The floor: a bare grpcio worker on a Work stream that answers SUCCESS at once (no SDK).

    floor_worker.py --api sync|aio --target HOST:PORT --queue Q --batch B --in-flight F \
        [--object-informer ID] (--keys N | --latency)

``--keys N``: drains N keys and prints ``result {"keys", "seconds", "keys_per_second"}`` (timed
from the first lease to the N-th). ``--latency``: until SIGTERM, times each lease whose object
carries ``data.ts`` (a change's wall-clock stamp) from that stamp to the lease's arrival, and
prints ``result`` with the percentiles. ``ready`` is printed once the stream has started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import grpc
import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from informerd.v1 import work_pb2, work_pb2_grpc

import proc

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]


class _Stop(Exception):
    pass


@dataclass
class _Tally:
    """What the worker counts: keys answered, the first/last lease times, latencies."""

    want: int
    done: int = 0
    first_ns: int = 0
    last_ns: int = 0
    latencies_us: list[float] = field(default_factory=list)

    def take(self, leases: work_pb2.Leases, latency: bool) -> work_pb2.ProcessRequest:
        now = time.time_ns()
        if not self.first_ns:
            self.first_ns = now
        outcomes = [
            work_pb2.Outcome(key=lease.key, token=lease.token, result=work_pb2.Outcome.SUCCESS)
            for lease in leases.leases
        ]
        if latency:
            for lease in leases.leases:
                if lease.object.found:
                    ts = json.loads(lease.object.object.json).get("data", {}).get("ts")
                    if ts and (us := proc.since_stamp_us(ts, now)) is not None:
                        self.latencies_us.append(us)
        self.done += len(outcomes)
        self.last_ns = now
        return work_pb2.ProcessRequest(outcomes=work_pb2.Outcomes(outcomes=outcomes))

    @property
    def finished(self) -> bool:
        return self.want > 0 and self.done >= self.want

    def result(self) -> dict[str, object]:
        seconds = (self.last_ns - self.first_ns) / 1e9
        out: dict[str, object] = {
            "keys": self.done,
            "seconds": seconds,
            "keys_per_second": self.done / seconds if seconds > 0 else 0.0,
            "cpu_s": time.process_time(),
        }
        if self.latencies_us:
            out["latency"] = proc.percentiles_us(self.latencies_us)
        return out


def _start(args: argparse.Namespace) -> work_pb2.ProcessRequest:
    return work_pb2.ProcessRequest(
        start=work_pb2.Start(
            queue=args.queue,
            max_batch=args.batch,
            max_in_flight=args.in_flight,
            worker_name="bench-floor",
            object_informer_id=args.object_informer,
        )
    )


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def run_sync(args: argparse.Namespace) -> dict[str, object]:
    tally = _Tally(args.keys)
    outbox: queue.SimpleQueue[work_pb2.ProcessRequest | None] = queue.SimpleQueue()
    outbox.put(_start(args))

    def requests() -> Iterator[work_pb2.ProcessRequest]:
        while (r := outbox.get()) is not None:
            yield r

    with grpc.insecure_channel(args.target, options=_CHANNEL_OPTIONS) as channel:
        responses = work_pb2_grpc.WorkStub(channel).Process(requests())
        signal.signal(signal.SIGTERM, _raise_stop)
        try:
            for resp in responses:
                kind = resp.WhichOneof("kind")
                if kind == "started":
                    proc.emit(proc.READY)
                elif kind == "leases":
                    outbox.put(tally.take(resp.leases, args.latency))
                    if tally.finished:
                        break
        except _Stop:
            pass
        finally:
            outbox.put(None)
            responses.cancel()
    return tally.result()


async def run_aio(args: argparse.Namespace) -> dict[str, object]:
    tally = _Tally(args.keys)
    outbox: asyncio.Queue[work_pb2.ProcessRequest | None] = asyncio.Queue()
    outbox.put_nowait(_start(args))

    async def requests() -> AsyncIterator[work_pb2.ProcessRequest]:
        while (r := await outbox.get()) is not None:
            yield r

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with grpc.aio.insecure_channel(args.target, options=_CHANNEL_OPTIONS) as channel:
        call = work_pb2_grpc.WorkStub(channel).Process(requests())

        async def read() -> None:
            async for resp in call:
                kind = resp.WhichOneof("kind")
                if kind == "started":
                    proc.emit(proc.READY)
                elif kind == "leases":
                    outbox.put_nowait(tally.take(resp.leases, args.latency))
                    if tally.finished:
                        return

        reader = asyncio.create_task(read())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([reader, stopper], return_when=asyncio.FIRST_COMPLETED)
        for t in (reader, stopper):
            t.cancel()
        outbox.put_nowait(None)
        call.cancel()
    return tally.result()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--api", choices=["sync", "aio"], required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--in-flight", type=int, required=True)
    p.add_argument("--object-informer", default="")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--keys", type=int, default=0)
    mode.add_argument("--latency", action="store_true")
    args = p.parse_args()
    result = run_sync(args) if args.api == "sync" else asyncio.run(run_aio(args))
    proc.emit_result(result)


if __name__ == "__main__":
    main()
