"""A worker process for the controller's multi-process tests.

Runs a Controller on the ConfigMaps of one namespace; every reconcile appends a start line and
an end line (``S|E pid key token monotonic``, one ``write`` each on an O_APPEND file, so lines
of concurrent reconciles never interleave) to ``--out``, sleeping ``--sleep`` seconds between
(forever once ``--hang-file`` exists). A reconcile cancelled because its Work stream broke
ends with a ``C`` line instead (from the controller's ``on_reconcile`` hook).
SIGTERM/SIGINT drain the controller; the process then exits 0. ``--ca`` (a PEM file) connects
with TLS verified against it, ``--token-file`` sends the file's bearer token (re-read as it
rotates).

With ``--record-versions`` (the chaos tests) every line has two more fields, the stream's epoch
and the object's resourceVersion (``-`` for a deleted object): ``S|E|C pid key token monotonic
epoch rv``; an outcome the daemon refused is a line ``R pid key token monotonic reason``, and
the process writes ``X pid refusals`` (the controller's refusal count) before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

from prometheus_client import REGISTRY

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
    p.add_argument("--record-versions", action="store_true")
    p.add_argument("--ca", default="")
    p.add_argument("--token-file", default="")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()
    # The resourceVersion each running reconcile saw, by (key, token).
    versions: dict[tuple[str, int], str] = {}

    def record(kind: str, ctx: Context, at: float | None = None) -> None:
        t = time.monotonic() if at is None else at
        line = f"{kind} {pid} {ctx.key} {ctx.token} {t:.6f}"
        if args.record_versions:
            rv = versions.get((ctx.key, ctx.token), "-")
            if kind != "S":
                versions.pop((ctx.key, ctx.token), None)
            line += f" {ctx.epoch} {rv}"
        os.write(fd, f"{line}\n".encode())

    class Refusals(logging.Handler):
        """Records the outcomes the daemon refused (the SDK logs each one with its key and
        token)."""

        def emit(self, r: logging.LogRecord) -> None:
            if r.getMessage().startswith("informerd refused"):
                key, token = getattr(r, "key", "?"), getattr(r, "token", 0)
                reason = r.getMessage().split(": ", 1)[-1].split(" ", 1)[0] or "?"
                t = time.monotonic()
                os.write(fd, f"R {pid} {key} {token} {t:.6f} {reason}\n".encode())

    if args.record_versions:
        logging.getLogger("informerd").addHandler(Refusals())

    def observe(event: ReconcileEvent) -> None:
        if event.kind == "cancel":
            record("C", event.context, event.at)

    async def reconcile(obj: KubeObject | None, ctx: Context) -> None:
        if args.record_versions:
            rv = obj.metadata.resource_version if obj is not None else "-"
            versions[(ctx.key, ctx.token)] = rv
        record("S", ctx)
        if args.hang_file and os.path.exists(args.hang_file):  # noqa: ASYNC240 (a test probe)
            await asyncio.sleep(3600)
        await asyncio.sleep(args.sleep)
        record("E", ctx)

    async def run() -> None:
        async with informerd.Client.connect(
            args.target,
            root_certificates=Path(args.ca) if args.ca else None,
            token_file=args.token_file or None,
            timeout_s=20,
        ) as client:
            ctl = Controller(args.queue, client, concurrency=args.concurrency, on_reconcile=observe)
            ctl.for_("v1", "ConfigMap", namespace=args.namespace)
            await ctl.run(reconcile, shutdown_on_signal=True)

    asyncio.run(run())
    if args.record_versions:
        refused = sum(
            sample.value
            for metric in REGISTRY.collect()
            for sample in metric.samples
            if sample.name == "informerd_sdk_work_refusals_total"
        )
        os.write(fd, f"X {pid} {int(refused)}\n".encode())
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
