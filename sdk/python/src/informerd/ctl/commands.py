"""What each informerctl command does, on an asyncio :class:`informerd.Client`.

Every command writes to ``out`` and returns the process's exit code; errors from the daemon
propagate as :class:`informerd.InformerdError` (``main`` prints them and exits 1), mistakes in
the arguments as :class:`UsageError` (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from typing import IO, Any

from informerd.admin import Replica
from informerd.client import Client
from informerd.ctl import output
from informerd.errors import NotFound
from informerd.informers import Added, Deleted, Informer, Reconnecting, Resnapshot, Synced, Updated
from informerd.objects import KubeObject
from informerd.v1 import admin_pb2, informers_pb2, queues_pb2
from informerd.work import Lease, Outcome, WorkStream


class UsageError(Exception):
    """A command line that cannot be run as given (exit code 2)."""


REFLECTOR = {
    informers_pb2.REFLECTOR_STATE_UNSPECIFIED: "",
    informers_pb2.REFLECTOR_STATE_IDLE: "Idle",
    informers_pb2.REFLECTOR_STATE_LISTING: "Listing",
    informers_pb2.REFLECTOR_STATE_WATCHING: "Watching",
    informers_pb2.REFLECTOR_STATE_BACKING_OFF: "BackingOff",
    informers_pb2.REFLECTOR_STATE_STOPPED: "Stopped",
}


def reflector_text(state: informers_pb2.InformerState) -> str:
    return REFLECTOR.get(state.reflector, "") or state.reflector_state


def resource_text(spec: informers_pb2.InformerSpec) -> str:
    r = spec.resource
    return f"{r.resource}.{r.group}" if r.group else r.resource


# --- informers, queues, workers, clusters, replica -------------------------------------------


INFORMER_COLUMNS: output.Columns[informers_pb2.InformerInfo] = output.Columns(
    kind="informers",
    headers=["ID", "RESOURCE", "NAMESPACE", "SYNCED", "OBJECTS", "REFLECTOR", "SUBSCRIBERS"],
    row=lambda i: [
        i.id,
        resource_text(i.spec),
        i.spec.namespace or "*",
        i.state.synced,
        i.state.objects,
        reflector_text(i.state),
        i.state.subscribers,
    ],
    name=lambda i: i.id,
    as_dict=output.to_dict,
    wide_headers=[
        "CLUSTER",
        "SELECTORS",
        "BYTES",
        "EVENTS",
        "LISTS",
        "WATCHES",
        "LAST-USED",
        "PINNED",
        "LAST-ERROR",
    ],
    wide_row=lambda i: [
        i.spec.cluster or "default",
        output.selectors({"label": i.spec.label_selector, "field": i.spec.field_selector}),
        output.size_text(i.state.bytes),
        i.state.events,
        i.state.lists,
        i.state.watches,
        output.age(i.last_used_unix_ms),
        i.pinned,
        i.state.last_error,
    ],
)


def _duration_or_none(ms: int) -> str:
    return output.duration_text(ms / 1000) if ms else ""


QUEUE_COLUMNS: output.Columns[admin_pb2.QueueDetails] = output.Columns(
    kind="queues",
    headers=["NAME", "DEPTH", "IN-FLIGHT", "DELAYED", "WORKERS", "ADDS", "RETRIES"],
    row=lambda d: [
        d.queue.spec.name,
        d.queue.state.depth,
        d.queue.state.in_flight,
        d.queue.state.delayed,
        d.queue.state.workers,
        d.queue.state.adds,
        d.queue.state.retries,
    ],
    name=lambda d: d.queue.spec.name,
    as_dict=output.to_dict,
    wide_headers=[
        "SOURCES",
        "EXPIRED-LEASES",
        "LEASE-TIMEOUT",
        "RESYNC",
        "LAST-USED",
        "PINNED",
        "SHUTTING-DOWN",
    ],
    wide_row=lambda d: [
        ",".join(_source_text(s) for s in d.queue.spec.sources),
        d.queue.state.expired_leases,
        _duration_or_none(d.queue.spec.lease_timeout_ms),
        _duration_or_none(d.queue.spec.resync_period_ms),
        output.age(d.queue.last_used_unix_ms),
        d.queue.pinned,
        d.queue.state.shutting_down,
    ],
)

# A worker with the name of its queue.
QueueWorker = tuple[str, admin_pb2.WorkerInfo]

WORKER_COLUMNS: output.Columns[QueueWorker] = output.Columns(
    kind="workers",
    headers=["QUEUE", "WORKER", "IN-FLIGHT", "MAX-IN-FLIGHT", "DRAINING"],
    row=lambda qw: [qw[0], qw[1].worker_name, qw[1].in_flight, qw[1].max_in_flight, qw[1].draining],
    name=lambda qw: qw[1].stream_id,
    as_dict=lambda qw: {"queue": qw[0], **output.to_dict(qw[1])},
    wide_headers=["STREAM", "PEER"],
    wide_row=lambda qw: [qw[1].stream_id, qw[1].peer],
)

CLUSTER_COLUMNS: output.Columns[admin_pb2.ClusterInfo] = output.Columns(
    kind="clusters",
    headers=["NAME", "SERVER", "DEFAULT", "LAST-ERROR"],
    row=lambda c: [c.name, c.server, c.is_default, c.last_error],
    name=lambda c: c.name,
    as_dict=output.to_dict,
    wide_headers=["ERROR-AGE"],
    wide_row=lambda c: [output.age(c.last_error_unix_ms)],
)


async def informers(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    infos = sorted(await client.admin.informers(), key=lambda i: i.id)
    output.print_list(INFORMER_COLUMNS, infos, args.output, out)
    return 0


async def queues(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    details = sorted(await client.admin.queues(), key=lambda d: d.queue.spec.name)
    output.print_list(QUEUE_COLUMNS, details, args.output, out)
    return 0


def _source_text(source: queues_pb2.QueueSource) -> str:
    which = source.WhichOneof("map_to")
    return f"{source.informer_id}({which})" if which and which != "object" else source.informer_id


async def workers(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    details = sorted(await client.admin.queues(), key=lambda d: d.queue.spec.name)
    if args.queue:
        details = [d for d in details if d.queue.spec.name == args.queue]
        if not details:
            raise NotFound(f"NOT_FOUND: no queue {args.queue!r}", reason="QUEUE_NOT_FOUND")
    rows = [(d.queue.spec.name, w) for d in details for w in d.workers]
    output.print_list(WORKER_COLUMNS, rows, args.output, out)
    return 0


async def clusters(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    output.print_list(CLUSTER_COLUMNS, await client.admin.clusters(), args.output, out)
    return 0


async def replica(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    r: Replica = await client.admin.get_replica()
    if args.output in ("json", "yaml"):
        info = await client.unary(client.stubs.admin.GetReplica, admin_pb2.GetReplicaRequest())
        output.dump(output.to_dict(info), args.output, out)
        return 0
    output.table(
        ["ROLE", "IDENTITY", "ADDRESS", "LEADER", "LEADER-ADDRESS", "LEASE", "TRANSITIONS"],
        [
            [
                r.role.name,
                r.identity,
                r.address,
                r.leader,
                r.leader_address,
                r.lease,
                r.lease_transitions,
            ]
        ],
        out,
    )
    return 0


# --- objects through an informer -------------------------------------------------------------


async def resolve_informer(client: Client, name: str, namespace: str = "") -> Informer:
    """The informer ``name`` names: its id, or a resource ("configmaps", "deployments.apps")
    that exactly one informer serves (narrowed to those watching ``namespace`` or all namespaces
    when several do)."""
    infos = await client.admin.informers()
    for info in infos:
        if info.id == name:
            return Informer(client, info)
    matches = [i for i in infos if resource_text(i.spec) == name]
    if len(matches) > 1 and namespace:
        matches = [i for i in matches if i.spec.namespace in (namespace, "")] or matches
    if len(matches) == 1:
        return Informer(client, matches[0])
    if not matches:
        known = ", ".join(sorted(i.id for i in infos)) or "none"
        raise NotFound(
            f"NOT_FOUND: no informer {name!r} (by id or resource); the daemon runs: {known}",
            reason="INFORMER_NOT_FOUND",
        )
    ids = ", ".join(sorted(i.id for i in matches))
    raise UsageError(
        f"informer {name!r}: {len(matches)} informers serve it ({ids}); name one by id"
    )


# Objects print as their metadata in tables and as the API server's JSON otherwise (a list
# in a v1 List, as kubectl prints one).
OBJECT_COLUMNS: output.Columns[KubeObject] = output.Columns(
    kind="items",
    headers=["NAMESPACE", "NAME", "RESOURCE-VERSION"],
    row=lambda o: [o.metadata.namespace, o.metadata.name, o.metadata.resource_version],
    name=lambda o: o.key,
    as_dict=lambda o: o.body,
    wide_headers=["GENERATION", "LABELS"],
    wide_row=lambda o: [
        o.metadata.generation,
        ",".join(f"{k}={v}" for k, v in sorted(o.metadata.labels.items())),
    ],
)


def _index_arg(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"--index: {text!r} is not NAME=VALUE (an index of the informer's spec)")
    return name, value


async def get(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    informer = await resolve_informer(client, args.informer, args.namespace or "")
    key = args.key
    if args.namespace and "/" not in key:
        key = f"{args.namespace}/{key}"
    obj = await informer.get(key)
    if obj is None:
        raise NotFound(
            f"NOT_FOUND: informer {informer.id} has no object {key!r}", reason="OBJECT_NOT_FOUND"
        )
    if args.output in ("json", "yaml"):
        output.dump(obj.body, args.output, out)
    else:
        output.print_list(OBJECT_COLUMNS, [obj], args.output, out)
    return 0


async def list_objects(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    informer = await resolve_informer(client, args.informer, args.namespace or "")
    objects = await informer.list(
        namespace=args.namespace or "",
        label_selector=args.selector or "",
        field_selector=args.field_selector or "",
        index=_index_arg(args.index),
    )
    objects.sort(key=lambda o: (o.metadata.namespace, o.metadata.name))
    if args.output in ("json", "yaml"):
        value = {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": objects.resource_version},
            "items": [o.body for o in objects],
        }
        output.dump(value, args.output, out)
    else:
        output.print_list(OBJECT_COLUMNS, objects, args.output, out)
    return 0


async def watch(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    """Tails the informer's events: one line each (``-o json``: one JSON object per line), the
    initial objects first unless ``--no-initial``; ``--max-events`` stops after that many."""
    informer = await resolve_informer(client, args.informer, args.namespace or "")
    printed = 0
    wide = args.output == "wide"
    if args.output in ("table", "wide"):
        headers = ["EVENT", *OBJECT_COLUMNS.headers, *(OBJECT_COLUMNS.wide_headers if wide else [])]
        out.write("   ".join(headers) + "\n")
    async with informer.watch(namespace=args.namespace or "") as events:
        async for event in events:
            line: dict[str, Any] | None = None
            if isinstance(event, (Added, Updated, Deleted)):
                if isinstance(event, Added) and event.initial and args.no_initial:
                    continue
                kind = event.type.value
                if args.output == "json":
                    line = {"type": kind, "object": event.object.body}
                    if isinstance(event, Added) and event.initial:
                        line["initial"] = True
                    if isinstance(event, Deleted) and event.tombstone:
                        line["tombstone"] = True
                else:
                    cells = OBJECT_COLUMNS.cells(event.object, wide)
                    out.write("   ".join([kind, *(output.cell(c) for c in cells)]) + "\n")
            elif isinstance(event, Synced):
                if args.output == "json":
                    line = {"type": "SYNCED"}
                else:
                    out.write("SYNCED\n")
            elif isinstance(event, Resnapshot):
                if args.output == "json":
                    line = {"type": "RESNAPSHOT", "keys": event.keys}
                else:
                    out.write(f"RESNAPSHOT   {event.keys} keys follow\n")
            elif isinstance(event, Reconnecting):
                if args.output == "json":
                    line = {"type": "RECONNECTING", "cause": str(event.cause)}
                else:
                    out.write(f"RECONNECTING   {event.cause}\n")
                continue
            if line is not None:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
            out.flush()
            if isinstance(event, (Added, Updated, Deleted)):
                printed += 1
                if args.max_events and printed >= args.max_events:
                    break
    return 0


# --- queue add | forget | len | drain ----------------------------------------------------------


async def queue_add(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    keys = _keys(args.keys)
    if args.after is not None and args.rate_limited:
        raise UsageError("queue add: --after and --rate-limited cannot be combined")
    if args.rate_limited:
        await client.queues.add_rate_limited(args.queue, keys, priority=args.priority)
    elif args.after is not None:
        await client.queues.add_after(args.queue, keys, args.after, priority=args.priority)
    else:
        await client.queues.add(args.queue, keys, priority=args.priority)
    out.write(f"queue/{args.queue}: {len(keys)} key{'s' if len(keys) != 1 else ''} added\n")
    return 0


async def queue_forget(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    keys = _keys(args.keys)
    await client.queues.forget(args.queue, keys)
    out.write(f"queue/{args.queue}: {len(keys)} key{'s' if len(keys) != 1 else ''} forgotten\n")
    return 0


async def queue_len(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    out.write(f"{await client.queues.len(args.queue)}\n")
    return 0


async def queue_drain(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    """Takes the keys waiting in the queue, as a worker would, and reports each one done and
    forgotten (Outcome SUCCESS) without reconciling it: an operator's way to empty a queue.
    Stops when no key waits and none is in flight (keys held by other workers are waited for
    until ``--idle``; delayed keys stay), after ``--max`` keys, or when no key came for
    ``--idle``. Keys delivered past ``--max`` go back to the queue untouched. Prints each key
    unless ``--quiet``."""
    drained = 0
    limit = args.max or 0
    credit = min(256, limit) if limit else 256
    loop = asyncio.get_running_loop()

    async def give_back(leases: Sequence[Lease]) -> None:
        # Added first, then Done: the queue holds the key as dirty while it is processing and
        # hands it out again after the Done, with its retry count kept.
        await client.queues.add(args.queue, [lease.key for lease in leases])
        for lease in leases:
            stream.complete(lease, Outcome.DONE)

    async with WorkStream(
        client, args.queue, max_in_flight=credit, worker_name="informerctl-drain"
    ) as stream:
        # A read is never cancelled (a cancelled read could lose leases, which the stream would
        # then hold forever): one that is pending at the end is awaited after the drain.
        receiving: asyncio.Task[list[Lease] | None] | None = None
        idle_until = loop.time() + args.idle
        while not limit or drained < limit:
            if receiving is None:
                receiving = asyncio.ensure_future(stream.receive())
            done, _ = await asyncio.wait({receiving}, timeout=0.2)
            if not done:
                # Nothing came for a moment. Keys handed to this stream count as in flight until
                # its outcomes are applied, so an empty queue with nothing in flight is the end.
                state = (await client.queues.get(args.queue)).state
                if (state.depth == 0 and state.in_flight == 0) or loop.time() > idle_until:
                    break
                continue
            leases, receiving = receiving.result(), None
            if leases is None:
                break
            idle_until = loop.time() + args.idle
            taken = leases[: limit - drained] if limit else leases
            for lease in taken:
                stream.complete(lease, Outcome.SUCCESS)
                if not args.quiet:
                    out.write(lease.key + "\n")
            drained += len(taken)
            if len(taken) < len(leases):
                await give_back(leases[len(taken) :])
        stream.drain()
        while (late := await (receiving or stream.receive())) is not None:
            receiving = None
            await give_back(late)
    out.write(f"queue/{args.queue}: {drained} key{'s' if drained != 1 else ''} drained\n")
    return 0


def _keys(keys: Sequence[str]) -> list[str]:
    for i, key in enumerate(keys):
        if not key:
            raise UsageError(f"keys[{i}]: empty (a key is namespace/name or name)")
    return list(keys)
