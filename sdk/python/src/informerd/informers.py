"""The informer API: shared List+Watch caches in the daemon, and what reads them.

    cms = await client.informers.ensure("v1", "ConfigMap", namespace="demo",
                                        indexes={"app": label_index("app")})
    await cms.wait_for_sync()
    obj = await cms.get("demo/settings")

Ensuring is idempotent: an equal spec returns the same running informer, whoever asks, with the
same id across daemon restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from informerd.objects import KubeObject
from informerd.v1 import informers_pb2, objects_pb2

if TYPE_CHECKING:
    from informerd.client import Client


def label_index(label_key: str) -> informers_pb2.IndexSpec:
    """An index by the value of one label."""
    return informers_pb2.IndexSpec(label_key=label_key)


def field_index(field_path: str) -> informers_pb2.IndexSpec:
    """An index by the value(s) of a field path, e.g. ``spec.volumes.configMap.name``."""
    return informers_pb2.IndexSpec(field_path=field_path)


def owner_index(
    kind: str = "", *, all_owners: bool = False, by_uid: bool = False
) -> informers_pb2.IndexSpec:
    """An index by owner (``Kind/name``, or the owner's uid with ``by_uid``)."""
    return informers_pb2.IndexSpec(
        owner=informers_pb2.OwnerIndex(kind=kind, all_owners=all_owners, by_uid=by_uid)
    )


def transform(
    *,
    keep_managed_fields: bool = False,
    drop_paths: Iterable[str] = (),
    keep_paths: Iterable[str] = (),
    metadata_only: bool = False,
) -> informers_pb2.TransformSpec:
    """What the informer keeps of each object (see TransformSpec in informers.proto)."""
    return informers_pb2.TransformSpec(
        keep_managed_fields=keep_managed_fields,
        drop_paths=list(drop_paths),
        keep_paths=list(keep_paths),
        metadata_only=metadata_only,
    )


class Informer:
    """A handle on one running informer (cheap; many handles may name the same informer)."""

    def __init__(self, client: Client, info: informers_pb2.InformerInfo) -> None:
        self._client = client
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def spec(self) -> informers_pb2.InformerSpec:
        return self.info.spec

    @property
    def namespaced(self) -> bool:
        return self.info.namespaced

    @property
    def kind(self) -> str:
        return self.info.kind

    async def refresh(self, timeout_s: float | None = None) -> informers_pb2.InformerInfo:
        """The informer's current info (state: synced, objects, reflector ...)."""
        self.info = await self._client.unary(
            self._client.stubs.informers.GetInformer,
            informers_pb2.GetInformerRequest(informer_id=self.id),
            timeout_s,
        )
        return self.info

    async def wait_for_sync(self, timeout_s: float = 60.0) -> informers_pb2.InformerInfo:
        """Returns once the informer's first list is in its cache; raises
        :class:`informerd.Timeout` (reason NOT_SYNCED, saying what the reflector is doing and
        its last error) after ``timeout_s``."""
        self.info = await self._client.unary(
            self._client.stubs.informers.WaitForSync,
            informers_pb2.WaitForSyncRequest(informer_id=self.id, timeout_ms=int(timeout_s * 1000)),
            timeout_s + 5.0,
        )
        return self.info

    async def get(self, key: str, timeout_s: float | None = None) -> KubeObject | None:
        """The cached object with ``key`` (``namespace/name`` or ``name``), or None."""
        resp = await self._client.unary(
            self._client.stubs.informers.Get,
            informers_pb2.GetRequest(informer_id=self.id, key=key),
            timeout_s,
        )
        return KubeObject(resp.object) if resp.found else None

    async def delete(self, timeout_s: float | None = None) -> None:
        """Stops the informer in the daemon (for every user of it) and frees its cache."""
        await self._client.unary(
            self._client.stubs.informers.DeleteInformer,
            informers_pb2.DeleteInformerRequest(informer_id=self.id),
            timeout_s,
        )
        self._client.forget_informer(self.id)

    def __repr__(self) -> str:
        return f"<Informer {self.id}>"


class Informers:
    """``client.informers``: ensure informers and get handles on them."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def ensure(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        indexes: Mapping[str, informers_pb2.IndexSpec] | None = None,
        transform: informers_pb2.TransformSpec | None = None,
        cluster: str = "",
        timeout_s: float | None = None,
    ) -> Informer:
        """Starts (or finds) the informer for this resource and returns a handle on it."""
        spec = informers_pb2.InformerSpec(
            cluster=cluster,
            api_version=api_version,
            kind=kind,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        for name, index in sorted((indexes or {}).items()):
            entry = spec.indexes.add()
            entry.CopyFrom(index)
            entry.name = name
        if transform is not None:
            spec.transform.CopyFrom(transform)
        return await self.ensure_spec(spec, timeout_s)

    async def ensure_resource(
        self,
        group: str,
        version: str,
        resource: str,
        *,
        namespace: str = "",
        timeout_s: float | None = None,
    ) -> Informer:
        """As :meth:`ensure`, naming the resource by group/version/plural."""
        spec = informers_pb2.InformerSpec(
            resource=objects_pb2.GroupVersionResource(
                group=group, version=version, resource=resource
            ),
            namespace=namespace,
        )
        return await self.ensure_spec(spec, timeout_s)

    async def ensure_spec(
        self, spec: informers_pb2.InformerSpec, timeout_s: float | None = None
    ) -> Informer:
        info = await self._client.unary(
            self._client.stubs.informers.EnsureInformer,
            informers_pb2.EnsureInformerRequest(spec=spec),
            timeout_s,
        )
        self._client.remember_informer(info.id, spec)
        return Informer(self._client, info)

    async def get(self, informer_id: str, timeout_s: float | None = None) -> Informer:
        """A handle on the informer with this id (NotFound if there is none)."""
        info = await self._client.unary(
            self._client.stubs.informers.GetInformer,
            informers_pb2.GetInformerRequest(informer_id=informer_id),
            timeout_s,
        )
        return Informer(self._client, info)
