"""A worker process for the controller's multi-process tests.

Runs a Controller on the ConfigMaps of one namespace; every reconcile appends a start line and
an end line (``S|E pid key token monotonic``, one ``write`` each on an O_APPEND file, so lines
of concurrent reconciles never interleave) to ``--out``, sleeping ``--sleep`` seconds between
(forever once ``--hang-file`` exists). A reconcile cancelled because its Work stream broke
ends with a ``C`` line instead (from the controller's ``on_reconcile`` hook).
SIGTERM/SIGINT drain the controller; the process then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time

import informerd
from informerd import Context, Controller, KubeObject, ReconcileEvent


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sleep", type=float, default=0.1)
    p.add_argument("--concurrency", type=int, default=2)
    # Once this file exists, reconciles that start never end (a worker wedged mid-reconcile,
    # for the kill test: the kill then surely lands mid-reconcile, however loaded the machine).
    p.add_argument("--hang-file", default="")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def record(kind: str, ctx: Context, at: float | None = None) -> None:
        t = time.monotonic() if at is None else at
        os.write(fd, f"{kind} {pid} {ctx.key} {ctx.token} {t:.6f}\n".encode())

    def observe(event: ReconcileEvent) -> None:
        if event.kind == "cancel":
            record("C", event.context, event.at)

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        record("S", ctx)
        if args.hang_file and os.path.exists(args.hang_file):  # noqa: ASYNC240 (a test probe)
            await asyncio.sleep(3600)
        await asyncio.sleep(args.sleep)
        record("E", ctx)

    async def run() -> None:
        async with informerd.Client.connect(args.target, timeout_s=20) as client:
            ctl = Controller(args.queue, client, concurrency=args.concurrency, on_reconcile=observe)
            ctl.for_("v1", "ConfigMap", namespace=args.namespace)
            await ctl.run(reconcile, shutdown_on_signal=True)

    asyncio.run(run())
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
