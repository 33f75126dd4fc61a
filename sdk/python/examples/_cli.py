"""What the examples' ``main()`` share: flags, logging, the two clients, SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import new_client_from_config

import informerd


class Runnable(Protocol):
    async def run(self, *, shutdown_on_signal: bool = False) -> None: ...


Factory = Callable[[informerd.Client, ApiClient, str], Awaitable[Runnable]]


async def _run(
    factory: Factory, options: informerd.ConnectionOptions, kubeconfig: str, namespace: str
) -> None:
    async with informerd.Client(options) as client:
        api = await new_client_from_config(config_file=kubeconfig)
        try:
            example = await factory(client, api, namespace)
            await example.run(shutdown_on_signal=True)
        finally:
            await api.close()


def main(doc: str, factory: Factory, argv: list[str] | None = None) -> None:
    """Parses the connection flags (``--target``; ``--token-file``, ``--ca-file``,
    ``--cert-file``/``--key-file``: informerd authenticates every call by default),
    ``--kubeconfig`` and ``--namespace``, and runs the controller that ``factory`` builds from
    the informerd client, the Kubernetes client and the namespace, until SIGTERM or SIGINT
    (then it drains: in-flight reconciles finish, their outcomes are sent)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    informerd.add_connection_arguments(parser)
    parser.add_argument("--kubeconfig", required=True, help="the credentials for the writes")
    parser.add_argument("--namespace", default="default", help="the namespace to reconcile")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    options = informerd.ConnectionOptions.from_arguments(args)
    asyncio.run(_run(factory, options, args.kubeconfig, args.namespace))
