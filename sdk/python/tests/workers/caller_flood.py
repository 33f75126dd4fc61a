"""A noisy caller for the per-caller limit test: floods informerd with calls past its limits.

Connects as one identity (a client certificate), and with ``--concurrency`` tasks, until
SIGTERM, ensures new informers (a fresh label selector each time) and opens Watch streams on
``--informer``. The test holds this identity at its informer and stream limits, so every attempt
should be refused (RESOURCE_EXHAUSTED, CALLER_LIMIT). Prints ``flooding`` once both kinds of
attempt were answered, and at the end one JSON line: the count of each outcome,
``"<what> <code> <reason> <limit>"`` (``<what> OK`` for attempts that got through).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import signal
import sys

import informerd
from informerd.v1 import informers_pb2


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--informer", required=True, help="an informer id to open Watch streams on")
    p.add_argument("--namespace", required=True, help="where the new informers would watch")
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    serial = itertools.count()

    def count(what: str, error: informerd.InformerdError | None) -> None:
        if error is None:
            counts[f"{what} OK"] += 1
        else:
            code = error.code.name if error.code is not None else "NONE"
            counts[f"{what} {code} {error.reason} {error.metadata.get('limit', '')}"] += 1

    async def ensure(client: informerd.Client) -> None:
        try:
            await client.informers.ensure(
                "v1", "ConfigMap", namespace=args.namespace, label_selector=f"flood={next(serial)}"
            )
            count("ensure", None)
        except informerd.InformerdError as e:
            count("ensure", e)

    async def watch(client: informerd.Client) -> None:
        informer = informerd.Informer(client, informers_pb2.InformerInfo(id=args.informer))
        async with informer.watch(reconnect=False) as events:
            try:
                await asyncio.wait_for(events.__anext__(), 10)
                count("watch", None)
            except informerd.InformerdError as e:
                count("watch", e)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        ready = False
        async with informerd.Client.connect(
            args.target,
            root_certificates=args.ca,
            client_certificate=args.cert,
            client_key=args.key,
            timeout_s=20,
        ) as client:

            async def flood(i: int) -> None:
                nonlocal ready
                while not stop.is_set():
                    await (ensure(client) if i % 2 == 0 else watch(client))
                    if (
                        not ready
                        and any(k.startswith("ensure") for k in counts)
                        and any(k.startswith("watch") for k in counts)
                    ):
                        ready = True
                        print("flooding", flush=True)

            await asyncio.gather(*(flood(i) for i in range(args.concurrency)))
        print(json.dumps(dict(counts)), flush=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
