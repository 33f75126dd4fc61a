"""``informerctl top``: a live view of the daemon's queues and informers, refreshed each interval.

Rates (adds/s, retries/s, events/s) are the counters' differences between two samples; the
first frame shows "-" for them. On a terminal each frame replaces the last (ANSI home + clear);
otherwise frames follow one another, so the output can be logged or tested.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from dataclasses import dataclass, field
from typing import IO

from informerd.client import Client
from informerd.ctl import output
from informerd.ctl.commands import UsageError, reflector_text, resource_text
from informerd.v1 import admin_pb2, informers_pb2

_CLEAR = "\x1b[H\x1b[2J"


@dataclass
class Sample:
    """One reading of Admin: the counters that rates are made of, by queue name / informer id."""

    at: float
    queues: list[admin_pb2.QueueDetails]
    informers: list[informers_pb2.InformerInfo]
    adds: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)

    @classmethod
    async def take(cls, client: Client) -> Sample:
        queues, informers = await asyncio.gather(client.admin.queues(), client.admin.informers())
        sample = cls(
            time.monotonic(),
            sorted(queues, key=lambda d: d.queue.spec.name),
            sorted(informers, key=lambda i: i.id),
        )
        for d in sample.queues:
            sample.adds[d.queue.spec.name] = d.queue.state.adds
            sample.retries[d.queue.spec.name] = d.queue.state.retries
        for i in sample.informers:
            sample.events[i.id] = i.state.events
        return sample


def _rate(now: dict[str, int], before: dict[str, int] | None, name: str, seconds: float) -> str:
    if before is None or name not in before or seconds <= 0:
        return "-"
    delta = now[name] - before[name]
    if delta < 0:  # the counter started over (the queue or informer was recreated)
        return "-"
    per_second = delta / seconds
    return f"{per_second:.0f}" if per_second >= 10 or per_second == 0 else f"{per_second:.1f}"


def render(sample: Sample, previous: Sample | None, target: str) -> str:
    """One frame of the view as text."""
    seconds = sample.at - previous.at if previous is not None else 0.0
    buf = io.StringIO()
    stamp = time.strftime("%H:%M:%S")
    buf.write(
        f"informerctl top — {target} — {stamp}   "
        f"{len(sample.queues)} queues, {len(sample.informers)} informers\n\n"
    )
    rows: list[list[object]] = []
    for d in sample.queues:
        name, st = d.queue.spec.name, d.queue.state
        rows.append(
            [
                name,
                st.depth,
                st.in_flight,
                st.delayed,
                st.workers,
                _rate(sample.adds, previous.adds if previous else None, name, seconds),
                _rate(sample.retries, previous.retries if previous else None, name, seconds),
                st.adds,
                st.retries,
            ]
        )
    output.table(
        [
            "QUEUE",
            "DEPTH",
            "IN-FLIGHT",
            "DELAYED",
            "WORKERS",
            "ADDS/S",
            "RETRIES/S",
            "ADDS",
            "RETRIES",
        ],
        rows,
        buf,
    )
    buf.write("\n")
    rows = []
    for i in sample.informers:
        ist = i.state
        rows.append(
            [
                i.id,
                resource_text(i.spec),
                i.spec.namespace or "*",
                ist.synced,
                ist.objects,
                _rate(sample.events, previous.events if previous else None, i.id, seconds),
                ist.events,
                ist.subscribers,
                reflector_text(ist),
            ]
        )
    output.table(
        [
            "INFORMER",
            "RESOURCE",
            "NAMESPACE",
            "SYNCED",
            "OBJECTS",
            "EVENTS/S",
            "EVENTS",
            "SUBSCRIBERS",
            "REFLECTOR",
        ],
        rows,
        buf,
    )
    return buf.getvalue()


async def top(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    """Prints a frame every ``--interval`` until interrupted, or ``--iterations`` frames."""
    interval: float = args.interval
    if interval < 0.1:
        raise UsageError(f"--interval: {interval * 1000:g}ms is below 100ms")
    tty = out.isatty()
    previous: Sample | None = None
    frames = 0
    while True:
        sample = await Sample.take(client)
        frame = render(sample, previous, client.options.target)
        out.write((_CLEAR + frame) if tty else (frame + "\n"))
        out.flush()
        frames += 1
        if args.iterations and frames >= args.iterations:
            return 0
        previous = sample
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - sample.at)))
