"""Writes to Kubernetes through your own client: finalizers, status patches, server-side apply.

informerd serves reads (informers, queues); writes go to the API server with the user's own
client, as in every peer (controller-runtime's split client, kube-rs' ``Api<K>``). These helpers
take an ``ApiClient`` of the official asyncio client, ``kubernetes_asyncio`` (the package's
``kubernetes`` extra: ``pip install 'informerd[kubernetes]'``), and work on any resource, built-in
or custom, named by a :class:`Resource`::

    from kubernetes_asyncio import config
    from informerd import kube

    api = await config.new_client_from_config(config_file=path)
    widgets = kube.Resource("example.com/v1", "Widget", "widgets")   # or await kube.discover(...)
    fin = kube.Finalizer(api, widgets, "example.com/cleanup")
    outcome = await fin.run(obj, apply=reconcile_live, cleanup=release_everything)
    await kube.patch_status(api, widgets, obj.name, {"observedGeneration": 3},
                            namespace=obj.namespace)
    await kube.apply(api, {"apiVersion": "v1", "kind": "ConfigMap", ...},
                     field_manager="my-controller", force=True)

Every call has a deadline (``timeout_s``, 30 s by default). Failures raise :class:`KubeApiError`
(an :class:`informerd.InformerdError`) carrying the HTTP status and the API's ``Status`` reason;
a write that lost a race — HTTP 409, or one of the helpers' JSON patches whose ``test`` failed
because the object changed since it was read — raises :class:`WriteConflict`, also an
:class:`informerd.Conflict`: let it propagate from a reconcile (the controller retries the key,
rate-limited) or return ``Result.requeue()``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar, overload
from urllib.parse import quote

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from informerd.errors import Conflict, InformerdError, NotFound, Timeout, Unavailable
from informerd.objects import KubeObject

JSON = dict[str, Any]
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0

_JSON_PATCH = "application/json-patch+json"
_MERGE_PATCH = "application/merge-patch+json"
_APPLY_PATCH = "application/apply-patch+yaml"


class KubeApiError(InformerdError):
    """A Kubernetes API call failed. ``status`` is the HTTP status (0 when no response came),
    ``reason`` the API ``Status`` reason (``Conflict``, ``NotFound``, ``Invalid`` ...) and
    ``body`` the parsed ``Status`` (or ``{}``)."""

    def __init__(self, message: str, *, status: int, reason: str = "", body: JSON | None = None):
        super().__init__(message, reason=reason, metadata={"http_status": str(status)})
        self.status = status
        self.body: JSON = body or {}


class WriteConflict(KubeApiError, Conflict):
    """The object changed since it was read: HTTP 409 (a stale resourceVersion, a server-side
    apply conflict without ``force``), or a ``test`` of one of the helpers' JSON patches failed.
    Retry with a fresh object: raise it from a reconcile, or return ``Result.requeue()``."""


class ObjectNotFound(KubeApiError, NotFound):
    """HTTP 404: no such object, or no such resource (kind/apiVersion not served)."""


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``api_version`` (``v1``, ``apps/v1``, ``example.com/v1``), ``kind``,
    ``plural`` (the URL segment, e.g. ``deployments``) and whether objects are namespaced."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def __post_init__(self) -> None:
        for name in ("api_version", "kind", "plural"):
            value = getattr(self, name)
            parts = value.split("/") if isinstance(value, str) else []
            if not all(parts) or not 1 <= len(parts) <= (2 if name == "api_version" else 1):
                raise ValueError(f"Resource.{name}: invalid value {value!r}")

    @classmethod
    def from_dynamic(cls, resource: Any) -> Resource:
        """From a ``kubernetes_asyncio.dynamic`` resource (``dyn.resources.get(...)``)."""
        group = getattr(resource, "group", "") or ""
        version = resource.api_version
        return cls(
            f"{group}/{version}" if group else version,
            resource.kind,
            resource.name,
            bool(resource.namespaced),
        )

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, name: str = "", namespace: str = "", subresource: str = "") -> str:
        """The URL path of the collection, or of one object (and its subresource)."""
        if self.namespaced and name and not namespace:
            raise ValueError(f"namespace: {self.kind} is namespaced; give the object's namespace")
        if not self.namespaced and namespace:
            raise ValueError(f"namespace: {self.kind} is cluster-scoped; got {namespace!r}")
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        if namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


async def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    query: Sequence[tuple[str, str]] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> JSON:
    """One API call with ``api``'s credentials; returns the parsed JSON answer. Raises
    :class:`KubeApiError` (:class:`WriteConflict` for 409, :class:`ObjectNotFound` for 404),
    :class:`informerd.Timeout` after ``timeout_s``, :class:`informerd.Unavailable` when the
    server cannot be reached."""
    try:
        result = await asyncio.wait_for(
            api.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                response_types_map={200: "object", 201: "object", 202: "object"},
                _return_http_data_only=True,
                _request_timeout=timeout_s,
            ),
            timeout_s + 1.0,
        )
    except ApiException as e:
        raise _api_error(e, method, path) from e
    except (asyncio.TimeoutError, TimeoutError) as e:
        raise Timeout(f"{method} {path}: no answer within {timeout_s} s") from e
    except aiohttp.ClientError as e:
        raise Unavailable(f"{method} {path}: {e}") from e
    return result if isinstance(result, dict) else {}


def _api_error(e: ApiException, method: str, path: str) -> KubeApiError:
    status = int(e.status or 0)
    body: JSON = {}
    raw_body = e.body
    raw = raw_body.decode(errors="replace") if isinstance(raw_body, bytes) else str(raw_body or "")
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    reason = str(body.get("reason") or e.reason or "")
    message = f"{method} {path}: HTTP {status} {reason}: {body.get('message') or raw or ''}"
    cls = {409: WriteConflict, 404: ObjectNotFound}.get(status, KubeApiError)
    return cls(message.strip(), status=status, reason=reason, body=body)


async def get(
    api: ApiClient,
    resource: Resource,
    name: str,
    *,
    namespace: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> JSON:
    """The object from the API server (not the cache); :class:`ObjectNotFound` if absent."""
    return await request(api, "GET", resource.path(name, namespace), timeout_s=timeout_s)


async def delete(
    api: ApiClient,
    resource: Resource,
    name: str,
    *,
    namespace: str = "",
    propagation_policy: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> JSON:
    """Deletes the object and returns what the server answered: the object, with
    ``deletionTimestamp`` set while finalizers hold it. ``propagation_policy`` is
    ``Orphan``, ``Background`` or ``Foreground`` (default: the resource's)."""
    options: JSON | None = None
    if propagation_policy is not None:
        if propagation_policy not in ("Orphan", "Background", "Foreground"):
            raise ValueError(
                f"delete: propagation_policy must be Orphan, Background or Foreground, "
                f"got {propagation_policy!r}"
            )
        options = {"kind": "DeleteOptions", "apiVersion": "v1"}
        options["propagationPolicy"] = propagation_policy
    path = resource.path(name, namespace)
    return await request(api, "DELETE", path, body=options, timeout_s=timeout_s)


_discovered: weakref.WeakKeyDictionary[ApiClient, dict[tuple[str, str], Resource]] = (
    weakref.WeakKeyDictionary()
)


async def discover(
    api: ApiClient, api_version: str, kind: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Resource:
    """The :class:`Resource` serving ``kind`` in ``api_version``, from the API server's
    discovery (cached per ``ApiClient`` once found). :class:`ObjectNotFound` if not served (yet:
    a new CRD is served once it is Established)."""
    if not api_version or not kind:
        raise ValueError(
            f"discover: api_version and kind are required, got {api_version!r} {kind!r}"
        )
    cache = _discovered.setdefault(api, {})
    found = cache.get((api_version, kind))
    if found is not None:
        return found
    path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    listing = await request(api, "GET", path, timeout_s=timeout_s)
    for r in listing.get("resources", []):
        if r.get("kind") == kind and "/" not in r.get("name", "/"):
            found = Resource(api_version, kind, r["name"], bool(r.get("namespaced")))
            cache[(api_version, kind)] = found
            return found
    raise ObjectNotFound(
        f"discover: {api_version} serves no kind {kind!r}", status=404, reason="NotFound"
    )


async def patch_status(
    api: ApiClient,
    resource: Resource,
    name: str,
    status: Mapping[str, Any],
    *,
    namespace: str = "",
    resource_version: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> JSON:
    """Merge-patches ``{"status": status}`` on the object's ``/status`` subresource (keys set to
    None are removed; lists are replaced whole) and returns the object. With
    ``resource_version`` the write is conditional: :class:`WriteConflict` if the object changed.
    The resource needs a status subresource (every CRD that declares ``subresources.status``)."""
    if not isinstance(status, Mapping):
        raise TypeError(f"patch_status: status must be a mapping, got {type(status).__name__}")
    patch: JSON = {"status": dict(status)}
    if resource_version is not None:
        patch["metadata"] = {"resourceVersion": resource_version}
    return await request(
        api,
        "PATCH",
        resource.path(name, namespace, "status"),
        body=patch,
        content_type=_MERGE_PATCH,
        timeout_s=timeout_s,
    )


async def apply(
    api: ApiClient,
    manifest: Mapping[str, Any],
    *,
    field_manager: str,
    force: bool = False,
    resource: Resource | None = None,
    subresource: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> JSON:
    """Server-side apply (``application/apply-patch+yaml``) of ``manifest`` — a full intent
    with ``apiVersion``, ``kind`` and ``metadata.name`` (and ``metadata.namespace`` for
    namespaced kinds) — as ``field_manager``; creates the object if needed and returns it.
    ``force=True`` takes fields owned by other managers (what controllers normally do);
    without it, such a conflict raises :class:`WriteConflict`. ``resource`` skips discovery;
    ``subresource="status"`` applies the status."""
    if not field_manager:
        raise ValueError("apply: field_manager is required (it names who owns the fields)")
    api_version, kind, name, namespace = _identity(manifest, "apply: manifest")
    if resource is None:
        resource = await discover(api, api_version, kind, timeout_s=timeout_s)
    query = [("fieldManager", field_manager)]
    if force:
        query.append(("force", "true"))
    return await request(
        api,
        "PATCH",
        resource.path(name, namespace if resource.namespaced else "", subresource),
        body=dict(manifest),
        content_type=_APPLY_PATCH,
        query=query,
        timeout_s=timeout_s,
    )


def _identity(manifest: Mapping[str, Any], what: str) -> tuple[str, str, str, str]:
    if not isinstance(manifest, Mapping):
        raise TypeError(f"{what} must be a mapping, got {type(manifest).__name__}")
    metadata = manifest.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{what}.metadata: required (a mapping with name)")
    fields = {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "metadata.name": metadata.get("name"),
    }
    for field, value in fields.items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"{what}.{field}: required, got {value!r}")
    namespace = metadata.get("namespace") or ""
    if not isinstance(namespace, str):
        raise ValueError(f"{what}.metadata.namespace: a string, got {namespace!r}")
    return fields["apiVersion"], fields["kind"], fields["metadata.name"], namespace  # type: ignore[return-value]


async def apply_manifest(
    api: ApiClient,
    source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]],
    *,
    field_manager: str = "informerd-apply",
    namespace: str = "",
    force: bool = True,
    timeout_s: float = 60.0,
) -> list[JSON]:
    """``kubectl apply --server-side`` without kubectl: applies every document of ``source`` —
    a YAML/JSON file (a :class:`~pathlib.Path`, or a one-line ``str`` naming an existing file),
    YAML text, one manifest or a list of them — in order, and returns the applied objects.
    Namespaced objects without ``metadata.namespace`` go to ``namespace``. Kinds served by a
    CRD applied earlier are waited for, and every CustomResourceDefinition is waited for until
    Established, so a CRD and its objects can share one file. Everything ends within
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    applied: list[JSON] = []
    for doc in _documents(source):
        api_version, kind, name, ns = _identity(doc, f"apply_manifest: document {len(applied)}")
        resource = await _discover_until(api, api_version, kind, deadline)
        if resource.namespaced and not ns:
            if not namespace:
                raise ValueError(
                    f"apply_manifest: {kind} {name} is namespaced and has no metadata.namespace; "
                    "pass namespace="
                )
            doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        obj = await apply(
            api,
            doc,
            field_manager=field_manager,
            force=force,
            resource=resource,
            timeout_s=_left(deadline),
        )
        if kind == "CustomResourceDefinition" and resource.group == "apiextensions.k8s.io":
            obj = await _wait_established(api, resource, name, deadline)
        applied.append(obj)
    return applied


def _documents(
    source: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    if isinstance(source, Mapping):
        return [source]
    if isinstance(source, str) and "\n" not in source and Path(source).is_file():
        source = Path(source)
    if isinstance(source, Path):
        source = source.read_text()
    if isinstance(source, str):
        docs = [d for d in yaml.safe_load_all(source) if d is not None]
    else:
        docs = list(source)
    out: list[Mapping[str, Any]] = []
    for i, d in enumerate(docs):
        if not isinstance(d, Mapping):
            raise ValueError(f"apply_manifest: document {i} is not a mapping: {d!r}")
        if d.get("kind", "").endswith("List") and isinstance(d.get("items"), list):
            out.extend(d["items"])
        else:
            out.append(d)
    return out


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("apply_manifest: timeout_s passed")
    return left


async def _discover_until(api: ApiClient, api_version: str, kind: str, deadline: float) -> Resource:
    while True:
        try:
            return await discover(api, api_version, kind, timeout_s=_left(deadline))
        except ObjectNotFound:
            if deadline - time.monotonic() < 0.5:
                raise
            await asyncio.sleep(0.25)


async def _wait_established(api: ApiClient, resource: Resource, name: str, deadline: float) -> JSON:
    while True:
        crd = await get(api, resource, name, timeout_s=_left(deadline))
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return crd
        if deadline - time.monotonic() < 0.5:
            raise Timeout(f"apply_manifest: CRD {name} not Established: {conditions}")
        await asyncio.sleep(0.25)


def set_condition(
    conditions: Iterable[Mapping[str, Any]],
    type: str,
    status: str | bool,
    *,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> list[JSON]:
    """``conditions`` (a ``metav1.Condition`` list) with the condition ``type`` set, as
    ``meta.SetStatusCondition`` does: ``lastTransitionTime`` changes only when the status does.
    ``status`` is ``"True"``/``"False"``/``"Unknown"`` or a bool."""
    if not type:
        raise ValueError("set_condition: type is required")
    if not reason:
        raise ValueError("set_condition: reason is required (CamelCase, as metav1.Condition)")
    value = ("True" if status else "False") if isinstance(status, bool) else status
    if value not in ("True", "False", "Unknown"):
        raise ValueError(f"set_condition: status must be True, False or Unknown, got {status!r}")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: list[JSON] = []
    new: JSON = {"type": type, "status": value, "reason": reason, "message": message}
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    for c in conditions:
        if c.get("type") == type:
            same = c.get("status") == value
            new["lastTransitionTime"] = c.get("lastTransitionTime", now) if same else now
            out.append(new)
        else:
            out.append(dict(c))
    if "lastTransitionTime" not in new:
        new["lastTransitionTime"] = now
        out.append(new)
    return out


class FinalizerEvent(enum.Enum):
    """What :meth:`Finalizer.run` did."""

    APPLIED = "applied"
    """The object is live: the finalizer is on it (added by this call if it was missing) and the
    ``apply`` handler ran."""
    CLEANED_UP = "cleaned_up"
    """The object is being deleted: the ``cleanup`` handler ran, then the finalizer was removed
    (the API server deletes the object once no finalizer is left)."""
    NOT_OURS = "not_ours"
    """The object is being deleted and does not carry this finalizer (already removed, or never
    added): nothing ran."""


@dataclass(frozen=True)
class FinalizerOutcome(Generic[T]):
    """The result of :meth:`Finalizer.run`: the ``event``, what the handler returned (None when
    no handler ran), whether this call added the finalizer, and the object as this call's last
    write returned it (None if it was gone when the finalizer was removed)."""

    event: FinalizerEvent
    value: T | None
    added: bool
    object: JSON | None


_QUALIFIED = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class Finalizer:
    """A finalizer as controller-runtime and kube-rs run one, on objects of ``resource``.

    :meth:`run` on every reconcile: on a live object it adds the finalizer if missing, then runs
    ``apply``; on an object being deleted that carries it, it runs ``cleanup`` and then removes
    the finalizer. A cleanup that raises leaves the finalizer in place (the key is retried).

    The writes are JSON patches with ``test`` operations, as kube-rs does, so that concurrent
    writers conflict instead of clobbering each other (finalizers are a list, and the API server
    does not deduplicate it): adding tests the current finalizer list (or, when the object has
    none, its resourceVersion), removing tests the finalizer at the index it is removed from. A
    failed test raises :class:`WriteConflict`.

    ``name`` must be domain-qualified (``example.com/cleanup``), as Kubernetes recommends."""

    def __init__(
        self,
        api: ApiClient,
        resource: Resource,
        name: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not isinstance(name, str) or not _QUALIFIED.match(name) or len(name) > 316:
            raise ValueError(
                f"Finalizer name: {name!r} is not a domain-qualified name like example.com/cleanup"
            )
        if not isinstance(resource, Resource):
            raise TypeError(f"Finalizer resource: a kube.Resource, got {type(resource).__name__}")
        self.api = api
        self.resource = resource
        self.name = name
        self.timeout_s = timeout_s

    @overload
    async def run(
        self,
        obj: KubeObject | Mapping[str, Any],
        *,
        apply: Callable[[JSON], Awaitable[T]],
        cleanup: Callable[[JSON], Awaitable[T]],
    ) -> FinalizerOutcome[T]: ...

    @overload
    async def run(
        self,
        obj: KubeObject | Mapping[str, Any],
        *,
        apply: Callable[[JSON], T],
        cleanup: Callable[[JSON], T],
    ) -> FinalizerOutcome[T]: ...

    async def run(
        self,
        obj: KubeObject | Mapping[str, Any],
        *,
        apply: Callable[[JSON], Any],
        cleanup: Callable[[JSON], Any],
    ) -> FinalizerOutcome[Any]:
        """Runs ``apply`` or ``cleanup`` (async or plain functions, given the object as a dict)
        with the finalizer handled around it; see the class doc."""
        body = _body(obj)
        meta = body.get("metadata", {})
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp"):
            if self.name not in finalizers:
                return FinalizerOutcome(FinalizerEvent.NOT_OURS, None, False, body)
            value = await _call(cleanup, body)
            after = await self.remove(body)
            return FinalizerOutcome(FinalizerEvent.CLEANED_UP, value, False, after)
        added = self.name not in finalizers
        if added:
            body = await self.add(body)
        value = await _call(apply, body)
        return FinalizerOutcome(FinalizerEvent.APPLIED, value, added, body)

    async def add(self, obj: KubeObject | Mapping[str, Any]) -> JSON:
        """Adds the finalizer (no write if it is there) and returns the object."""
        body = _body(obj)
        meta = body.get("metadata", {})
        finalizers = list(meta.get("finalizers") or [])
        if self.name in finalizers:
            return body
        if finalizers:
            ops: list[JSON] = [
                {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                {"op": "add", "path": "/metadata/finalizers/-", "value": self.name},
            ]
        else:
            ops = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": meta.get("resourceVersion", ""),
                },
                {"op": "add", "path": "/metadata/finalizers", "value": [self.name]},
            ]
        return await self._json_patch(meta, ops)

    async def remove(self, obj: KubeObject | Mapping[str, Any]) -> JSON | None:
        """Removes the finalizer (no write if it is not there) and returns the object as the
        write returned it (the API server deletes a deleting object once its last finalizer is
        gone), or None if the object was already gone."""
        body = _body(obj)
        meta = body.get("metadata", {})
        finalizers = list(meta.get("finalizers") or [])
        if self.name not in finalizers:
            return body
        at = f"/metadata/finalizers/{finalizers.index(self.name)}"
        ops = [{"op": "test", "path": at, "value": self.name}, {"op": "remove", "path": at}]
        try:
            return await self._json_patch(meta, ops)
        except ObjectNotFound:
            return None

    async def _json_patch(self, meta: Mapping[str, Any], ops: list[JSON]) -> JSON:
        path = self.resource.path(
            meta.get("name", ""), meta.get("namespace", "") if self.resource.namespaced else ""
        )
        try:
            return await request(
                self.api,
                "PATCH",
                path,
                body=ops,
                content_type=_JSON_PATCH,
                timeout_s=self.timeout_s,
            )
        except KubeApiError as e:
            # A JSON patch built from what we read fails to apply (422) only because the object
            # changed since: a conflict, like a stale resourceVersion.
            if e.status == 422 and not isinstance(e, WriteConflict):
                raise WriteConflict(
                    f"finalizer {self.name}: the object changed since it was read ({e.message})",
                    status=e.status,
                    reason=e.reason,
                    body=e.body,
                ) from e
            raise


def _body(obj: KubeObject | Mapping[str, Any]) -> JSON:
    if isinstance(obj, KubeObject):
        return obj.body
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"obj: a KubeObject or a mapping, got {type(obj).__name__}")


async def _call(fn: Callable[[JSON], Any], body: JSON) -> Any:
    result = fn(body)
    if inspect.isawaitable(result):
        return await result
    return result


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Finalizer",
    "FinalizerEvent",
    "FinalizerOutcome",
    "KubeApiError",
    "ObjectNotFound",
    "Resource",
    "WriteConflict",
    "apply",
    "apply_manifest",
    "delete",
    "discover",
    "get",
    "patch_status",
    "request",
    "set_condition",
]
