"""The chaos tests' churn: a process that keeps changing random ConfigMaps of one namespace.

    python churn.py --kubeconfig KC --namespace NS --count N --rate 30 --out churn.log

Updates ``chaos-NNNN`` (0 <= NNNN < N) at about ``--rate`` changes per second (a merge patch
of ``data.n``), each request with a deadline, so an API server that stops answering (SIGSTOP)
costs timeouts, not the churn itself. Every change that succeeded is one line ``U name rv
monotonic`` of ``--out``; every failed one ``F name monotonic error``. SIGTERM/SIGINT stop
sending, wait for the requests in flight, write ``D sent ok failed`` and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import time

from kubernetes_asyncio import config as kube_config

from informerd import kube


def name_of(i: int) -> str:
    return f"chaos-{i:04d}"


async def run(args: argparse.Namespace) -> int:
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rng = random.Random(args.seed)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = await kube_config.new_client_from_config(config_file=args.kubeconfig)
    counts = {"sent": 0, "ok": 0, "failed": 0}
    in_flight: set[asyncio.Task[None]] = set()
    configmaps = kube.Resource("v1", "ConfigMap", "configmaps", namespaced=True)

    async def change(i: int, n: int) -> None:
        name = name_of(i)
        try:
            obj = await kube.request(
                api,
                "PATCH",
                configmaps.path(name, args.namespace),
                body={"data": {"n": str(n)}},
                content_type="application/merge-patch+json",
                timeout_s=args.request_timeout,
            )
        except Exception as e:  # a timeout during an outage, a refused connection ...
            counts["failed"] += 1
            msg = str(e).replace("\n", " ")[:200]
            os.write(fd, f"F {name} {time.monotonic():.6f} {msg}\n".encode())
            return
        counts["ok"] += 1
        rv = obj.get("metadata", {}).get("resourceVersion", "")
        os.write(fd, f"U {name} {rv} {time.monotonic():.6f}\n".encode())

    try:
        interval = 1.0 / args.rate
        next_at = time.monotonic()
        n = 0
        while not stop.is_set():
            # Requests that hang (the API server stopped) are capped, so that a resumed server
            # is not met by a flood.
            if len(in_flight) < args.max_in_flight:
                n += 1
                counts["sent"] += 1
                task = asyncio.create_task(change(rng.randrange(args.count), n))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < -1:  # fell behind (a loaded machine): do not burst to catch up
                next_at = time.monotonic()
                delay = 0
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), max(delay, 0))
        if in_flight:
            await asyncio.wait(in_flight)
    finally:
        await api.close()
    os.write(fd, f"D {counts['sent']} {counts['ok']} {counts['failed']}\n".encode())
    os.close(fd)
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--request-timeout", type=float, default=5.0)
    p.add_argument("--max-in-flight", type=int, default=50)
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
