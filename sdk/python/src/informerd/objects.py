"""Kubernetes objects as the daemon serves them: the JSON, and the metadata it already parsed."""

from __future__ import annotations

import json
from typing import Any

from informerd.v1 import objects_pb2


class KubeObject:
    """One object from an informer's cache.

    ``metadata`` is what the daemon parsed (name, namespace, labels, owners, generation ...), so
    routing and filtering need no JSON parse; ``body`` parses the JSON on first use (a dict, as
    the official client's ``to_dict()`` or ``json.loads`` would give). ``raw`` is the JSON bytes
    exactly as cached (after the informer's transform)."""

    __slots__ = ("_body", "metadata", "raw")

    def __init__(self, proto: objects_pb2.Object) -> None:
        self.raw: bytes = proto.json
        # A copy, not proto.metadata: a sub-message shares its response's memory (protobuf's
        # arena), so keeping it would keep the whole batch (up to 64 MiB) alive for one object.
        self.metadata: objects_pb2.ObjectMeta = objects_pb2.ObjectMeta()
        self.metadata.CopyFrom(proto.metadata)
        self._body: dict[str, Any] | None = None

    def copy(self) -> KubeObject:
        """Another wrapper of the same bytes and metadata whose body is not parsed yet: what a
        cache hands out, so that a reader's parse (and any change to ``body``) stays with the
        reader and the cache keeps only the bytes. Treat ``metadata`` as read-only."""
        other = KubeObject.__new__(KubeObject)
        other.raw = self.raw
        other.metadata = self.metadata
        other._body = None
        return other

    @property
    def body(self) -> dict[str, Any]:
        if self._body is None:
            parsed = json.loads(self.raw)
            if not isinstance(parsed, dict):
                raise ValueError(f"{self.key}: the object's JSON is not an object")
            self._body = parsed
        return self._body

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for cluster-scoped objects."""
        return self.metadata.key

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def resource_version(self) -> str:
        return self.metadata.resource_version

    @property
    def generation(self) -> int:
        return self.metadata.generation

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.labels)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.metadata.annotations)

    @property
    def deleting(self) -> bool:
        """metadata.deletionTimestamp is set."""
        return bool(self.metadata.deletion_timestamp)

    def __repr__(self) -> str:
        kind = self.metadata.kind or "object"
        return f"<{kind} {self.key} rv={self.resource_version}>"


def split_key(key: str) -> tuple[str, str]:
    """``"ns/name"`` → ``("ns", "name")``; ``"name"`` → ``("", "name")``."""
    namespace, sep, name = key.rpartition("/")
    return (namespace, name) if sep else ("", key)
