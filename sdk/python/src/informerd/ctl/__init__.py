"""informerctl: see and steer a running informerd, as kubectl does a cluster.

    informerctl informers                     # the informers, as `kubectl get` prints tables
    informerctl queues -o wide
    informerctl workers cm-hash
    informerctl list configmaps -n demo -l app=web
    informerctl get configmaps demo/settings -o yaml
    informerctl watch pods -n demo
    informerctl queue add cm-hash demo/settings
    informerctl top

It is the Python SDK's console script (``pip install informerd`` installs it), so it reaches the
daemon with the SDK's connection options: ``--target``, TLS (``--ca-file``, ``--cert-file``,
``--key-file``, ``--server-name``) and a bearer token (``--token``, ``--token-file``), also read
from ``INFORMERD_TARGET``, ``INFORMERD_TOKEN`` and ``INFORMERD_TOKEN_FILE``. Exit codes: 0 done,
1 the daemon refused or could not be reached (the message says why), 2 a wrong command line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import IO

from informerd.client import Client
from informerd.connection import ConnectionOptions, add_connection_arguments
from informerd.ctl import commands, completion, output, top
from informerd.errors import InformerdError
from informerd.queues import validate_priority

Command = Callable[[Client, argparse.Namespace, IO[str]], Awaitable[int]]

PROG = "informerctl"


def _count(text: str) -> int:
    """A whole number of 0 or more (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _seconds(text: str) -> float:
    """A duration ("500ms", "5s", "2m") in seconds."""
    try:
        return output.parse_duration(text, "duration")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None


def _priority(text: str) -> int:
    """A queue priority, an int in MIN_PRIORITY..MAX_PRIORITY."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    try:
        validate_priority(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None
    return value


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="See and steer a running informerd: informers, queues, workers, objects.",
        epilog="Exit codes: 0 done, 1 the daemon refused or was unreachable, 2 bad usage.",
    )
    conn = add_connection_arguments(parser)
    conn.add_argument(
        "--timeout", type=_seconds, default=10.0, help="each call's deadline, e.g. 5s (default 10s)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, run: Command, help_text: str, formats: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(run=run)
        if formats:
            p.add_argument(
                "-o",
                "--output",
                choices=formats,
                default=formats[0],
                help="output format (default %(default)s)",
            )
        return p

    add("informers", commands.informers, "list the daemon's informers", output.LIST_FORMATS)
    add("queues", commands.queues, "list the daemon's queues", output.LIST_FORMATS)
    p = add("workers", commands.workers, "list the Work streams on the queues", output.LIST_FORMATS)
    p.add_argument("queue", nargs="?", help="only this queue's workers")
    add("clusters", commands.clusters, "list the daemon's clusters", output.LIST_FORMATS)
    add(
        "replica",
        commands.replica,
        "this daemon's role in its replica set",
        ("table", "json", "yaml"),
    )

    def object_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "informer",
            help="the informer: its id, or the resource it serves "
            "(configmaps, deployments.apps) when one informer does",
        )
        p.add_argument("-n", "--namespace", help="the namespace (default: all the informer has)")

    p = add("get", commands.get, "print one cached object", output.LIST_FORMATS)
    object_args(p)
    p.add_argument("key", help="namespace/name, or name (with -n, or for cluster-scoped objects)")
    p = add("list", commands.list_objects, "list cached objects", output.LIST_FORMATS)
    object_args(p)
    p.add_argument("-l", "--selector", help="label selector, e.g. app=web,tier!=db")
    p.add_argument("--field-selector", help="field selector, e.g. metadata.name=x")
    p.add_argument("--index", metavar="NAME=VALUE", help="objects under VALUE in index NAME")
    p = add("watch", commands.watch, "tail an informer's events", ("table", "wide", "json"))
    object_args(p)
    p.add_argument(
        "--no-initial",
        action="store_true",
        help="skip the objects the stream starts with (print changes only)",
    )
    p.add_argument(
        "--max-events",
        type=_count,
        default=0,
        help="stop after this many object events (0: until interrupted)",
    )

    p = sub.add_parser(
        "queue",
        help="add, forget, count or drain a queue's keys",
        description="Add, forget, count or drain a queue's keys.",
    )
    qsub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    q = qsub.add_parser("add", help="add keys (now, --after a delay, or --rate-limited)")
    q.set_defaults(run=commands.queue_add)
    q.add_argument("queue")
    q.add_argument("keys", nargs="+", metavar="KEY")
    q.add_argument(
        "--after", type=_seconds, metavar="DURATION", help="add after this delay, e.g. 30s"
    )
    q.add_argument(
        "--rate-limited",
        action="store_true",
        help="add after the queue's rate limiter's delay for each key",
    )
    q.add_argument(
        "--priority",
        type=_priority,
        metavar="N",
        help="wait at this priority (-1000000..1000000, default 0): higher goes first, and a key"
        " already waiting keeps the higher of its two",
    )
    q = qsub.add_parser("forget", help="reset keys' retry counts (client-go's Forget)")
    q.set_defaults(run=commands.queue_forget)
    q.add_argument("queue")
    q.add_argument("keys", nargs="+", metavar="KEY")
    q = qsub.add_parser("len", help="print how many keys wait (client-go's Len)")
    q.set_defaults(run=commands.queue_len)
    q.add_argument("queue")
    q = qsub.add_parser("drain", help="take the waiting keys and mark them done, unreconciled")
    q.set_defaults(run=commands.queue_drain)
    q.add_argument("queue")
    q.add_argument(
        "--max", type=_count, default=0, help="drain at most this many keys (0: all that wait)"
    )
    q.add_argument(
        "--idle",
        type=_seconds,
        default=2.0,
        help="stop when no key came for this long (default 2s)",
    )
    q.add_argument("-q", "--quiet", action="store_true", help="print only the count")

    p = add("top", top.top, "a live view of queues and informers")
    p.add_argument(
        "--interval", type=_seconds, default=1.0, help="refresh period, at least 100ms (default 1s)"
    )
    p.add_argument(
        "--iterations",
        type=_count,
        default=0,
        help="stop after this many frames (0: until interrupted)",
    )

    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script: source <(informerctl completion bash)",
    )
    p.add_argument("shell", choices=("bash", "zsh"))
    # Completion's helper: the names of informers or queues, for the script to offer.
    p = sub.add_parser("__names", add_help=False)
    p.add_argument("kind", choices=("informers", "queues"))
    return parser


def connection_options(args: argparse.Namespace) -> ConnectionOptions:
    return ConnectionOptions.from_arguments(
        args, timeout_s=args.timeout if args.timeout > 0 else 10.0
    )


async def _run(args: argparse.Namespace, out: IO[str]) -> int:
    async with Client(connection_options(args)) as client:
        if args.command == "__names":
            return await completion.names(client, args.kind, out)
        run: Command = args.run
        return await run(client, args, out)


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None, prog: str = PROG) -> int:
    """Runs one command line; returns the exit code (the console script exits with it).
    ``prog`` is the name usage and errors give the command (``kubectl informerd`` as a plugin)."""
    out = out or sys.stdout
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.command == "completion":
        out.write(completion.script(parser, args.shell))
        return 0
    try:
        return asyncio.run(_run(args, out))
    except commands.UsageError as e:
        parser.exit(2, f"{prog}: error: {e}\n")
    except BrokenPipeError:
        return 0
    except (ValueError, OSError) as e:
        # Bad option values (ConnectionOptions names the field) and unreadable files.
        parser.exit(2, f"{prog}: error: {e}\n")
    except InformerdError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def console_main() -> None:
    """The ``informerctl`` console script."""
    sys.exit(main())


def kubectl_plugin_main() -> None:
    """The ``kubectl-informerd`` console script: kubectl runs it for ``kubectl informerd ...``
    when it is on PATH (kubectl's plugin rule), with the same commands and flags."""
    sys.exit(main(prog="kubectl informerd"))
