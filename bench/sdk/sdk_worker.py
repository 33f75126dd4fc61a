"""informerd's SDK: a no-op :class:`informerd.Controller` reconciling ConfigMaps.

    sdk_worker.py --target HOST:PORT --queue Q --namespace NS --concurrency F [--max-batch B] \
        (--keys N | --latency | --seen)

The controller is ``for_("v1", "ConfigMap", namespace=NS)`` on queue Q with ``concurrency`` F
(its Work stream's credit) and ``max_batch`` B (keys per delivery; 0, the default: the credit).
``--keys N``: stops after N reconciles and prints ``result`` with
the rate (timed from the first reconcile's entry to the N-th's). ``--latency``: until SIGTERM,
times each reconcile of an object carrying ``data.ts`` from that stamp to the reconcile's entry.
``--seen``: until SIGTERM, prints ``seen KEY`` the first time a key is reconciled. ``ready`` is
printed once the Work stream has started.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import informerd
from informerd import Context, Controller, KubeObject

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc


async def run(args: argparse.Namespace) -> dict[str, object]:
    client = informerd.Client.connect(args.target)
    ctl = Controller(args.queue, client, concurrency=args.concurrency, max_batch=args.max_batch)
    ctl.for_("v1", "ConfigMap", namespace=args.namespace)
    done = 0
    first_ns = last_ns = 0
    latencies_us: list[float] = []
    seen: set[str] = set()

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        nonlocal done, first_ns, last_ns
        now = time.time_ns()
        if not first_ns:
            first_ns = now
        last_ns = now
        done += 1
        if args.latency and obj is not None:
            ts = obj.body.get("data", {}).get("ts")
            if ts and (us := proc.since_stamp_us(ts, now)) is not None:
                latencies_us.append(us)
        if args.seen and ctx.key not in seen:
            seen.add(ctx.key)
            proc.emit_seen([ctx.key])
        if done == args.keys:
            ctl.stop()

    async def announce() -> None:
        # The Controller says nothing when its stream starts: poll its counter.
        while ctl.streams_opened == 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        proc.emit(proc.READY)

    announcer = asyncio.create_task(announce())
    try:
        await ctl.run(reconcile, shutdown_on_signal=True)
    finally:
        announcer.cancel()
        await client.close()
    seconds = (last_ns - first_ns) / 1e9
    result: dict[str, object] = {
        "keys": done,
        "seconds": seconds,
        "keys_per_second": done / seconds if seconds > 0 else 0.0,
        "cpu_s": time.process_time(),
    }
    if latencies_us:
        result["latency"] = proc.percentiles_us(latencies_us)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--max-batch", type=int, default=0)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--keys", type=int, default=0)
    mode.add_argument("--latency", action="store_true")
    mode.add_argument("--seen", action="store_true")
    args = p.parse_args()
    proc.emit_result(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
