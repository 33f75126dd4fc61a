"""informerd.kube against the real kube-apiserver: finalizers, status patches, server-side apply."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

import informerd
from informerd import kube
from informerd.testing.plugin import ApplyManifest

GROUP = "kubetest.informerd.io"
GIZMOS = kube.Resource(f"{GROUP}/v1", "Gizmo", "gizmos")
CONFIGMAPS = kube.Resource("v1", "ConfigMap", "configmaps")
FIN = f"{GROUP}/cleanup"

GIZMO_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gizmos.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}},
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def new_gizmo(apply_manifest: ApplyManifest, name: str, size: int = 1) -> dict[str, Any]:
    await apply_manifest(GIZMO_CRD)
    [obj] = await apply_manifest(
        {
            "apiVersion": GIZMOS.api_version,
            "kind": "Gizmo",
            "metadata": {"name": name},
            "spec": {"size": size},
        }
    )
    return obj


async def test_a_finalizer_is_added_on_a_live_object_and_cleanup_removes_it(
    kube_api: Any, kube_namespace: str, apply_manifest: ApplyManifest
) -> None:
    obj = await new_gizmo(apply_manifest, "g1")
    fin = kube.Finalizer(kube_api, GIZMOS, FIN)
    seen: list[tuple[str, int]] = []

    async def apply(body: dict[str, Any]) -> str:
        seen.append(("apply", len(body["metadata"]["finalizers"])))
        return "applied"

    def cleanup(body: dict[str, Any]) -> str:  # plain functions work too
        seen.append(("cleanup", len(body["metadata"]["finalizers"])))
        return "cleaned"

    first = await fin.run(obj, apply=apply, cleanup=cleanup)
    assert first.event is kube.FinalizerEvent.APPLIED
    assert first.added
    assert first.value == "applied"
    live = await kube.get(kube_api, GIZMOS, "g1", namespace=kube_namespace)
    assert live["metadata"]["finalizers"] == [FIN]

    # Once it is there, a reconcile writes nothing.
    again = await fin.run(live, apply=apply, cleanup=cleanup)
    assert again.event is kube.FinalizerEvent.APPLIED
    assert not again.added
    after = await kube.get(kube_api, GIZMOS, "g1", namespace=kube_namespace)
    assert after["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]

    # Deleting leaves the object (held by the finalizer) until cleanup has run.
    deleting = await kube.delete(kube_api, GIZMOS, "g1", namespace=kube_namespace)
    assert deleting["metadata"]["deletionTimestamp"]
    held = await kube.get(kube_api, GIZMOS, "g1", namespace=kube_namespace)
    assert held["metadata"]["finalizers"] == [FIN]
    done = await fin.run(held, apply=apply, cleanup=cleanup)
    assert done.event is kube.FinalizerEvent.CLEANED_UP
    assert done.value == "cleaned"
    assert seen == [("apply", 1), ("apply", 1), ("cleanup", 1)]
    with pytest.raises(kube.ObjectNotFound):
        await kube.get(kube_api, GIZMOS, "g1", namespace=kube_namespace)

    # A deleting object without our finalizer: nothing runs.
    gone = await fin.run(
        held | {"metadata": held["metadata"] | {"finalizers": ["other.io/x"]}},
        apply=apply,
        cleanup=cleanup,
    )
    assert gone.event is kube.FinalizerEvent.NOT_OURS
    assert gone.value is None
    assert len(seen) == 3


async def test_a_cleanup_that_raises_keeps_the_finalizer(
    kube_api: Any, kube_namespace: str, apply_manifest: ApplyManifest
) -> None:
    obj = await new_gizmo(apply_manifest, "g2")
    fin = kube.Finalizer(kube_api, GIZMOS, FIN)
    await fin.add(obj)
    await kube.delete(kube_api, GIZMOS, "g2", namespace=kube_namespace)
    held = await kube.get(kube_api, GIZMOS, "g2", namespace=kube_namespace)

    def failing_cleanup(body: dict[str, Any]) -> None:
        raise RuntimeError("the bucket is still in use")

    with pytest.raises(RuntimeError, match="still in use"):
        await fin.run(held, apply=lambda b: None, cleanup=failing_cleanup)
    still = await kube.get(kube_api, GIZMOS, "g2", namespace=kube_namespace)
    assert still["metadata"]["finalizers"] == [FIN]
    assert (await fin.run(still, apply=lambda b: None, cleanup=lambda b: None)).event is (
        kube.FinalizerEvent.CLEANED_UP
    )


async def test_concurrent_finalizer_writers_conflict_instead_of_clobbering(
    kube_api: Any, kube_namespace: str, apply_manifest: ApplyManifest
) -> None:
    """Two controllers add their finalizers from the same read: the second one's test fails
    (WriteConflict, an informerd.Conflict), and after a fresh read both finalizers are kept."""
    stale = await new_gizmo(apply_manifest, "g3")
    ours = kube.Finalizer(kube_api, GIZMOS, FIN)
    theirs = kube.Finalizer(kube_api, GIZMOS, "other.informerd.io/hold")
    await theirs.add(stale)
    with pytest.raises(kube.WriteConflict) as e:
        await ours.add(stale)  # no finalizers in this read: the resourceVersion test fails
    assert isinstance(e.value, informerd.Conflict)
    assert "changed since it was read" in str(e.value)
    fresh = await ours.add(await kube.get(kube_api, GIZMOS, "g3", namespace=kube_namespace))
    assert fresh["metadata"]["finalizers"] == ["other.informerd.io/hold", FIN]

    # A third writer with a read of one finalizer: the list test fails.
    third = kube.Finalizer(kube_api, GIZMOS, "third.informerd.io/hold")
    one = stale | {"metadata": stale["metadata"] | {"finalizers": ["other.informerd.io/hold"]}}
    with pytest.raises(kube.WriteConflict):
        await third.add(one)

    # Removing from a read where our finalizer sat at another index fails too.
    await theirs.remove(fresh)  # ours moves from index 1 to 0
    with pytest.raises(kube.WriteConflict):
        await ours.remove(fresh)
    now = await kube.get(kube_api, GIZMOS, "g3", namespace=kube_namespace)
    assert now["metadata"]["finalizers"] == [FIN]
    after = await ours.remove(now)
    assert after is not None
    assert "finalizers" not in after["metadata"]


async def test_a_finalizer_on_a_built_in_kind(kube_api: Any, kube_namespace: str) -> None:
    cm = await kube.apply(
        kube_api,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": kube_namespace},
        },
        field_manager="test",
    )
    fin = kube.Finalizer(kube_api, CONFIGMAPS, FIN)
    assert (await fin.run(cm, apply=lambda b: None, cleanup=lambda b: None)).added
    await kube.delete(
        kube_api, CONFIGMAPS, "cm", namespace=kube_namespace, propagation_policy="Background"
    )
    held = await kube.get(kube_api, CONFIGMAPS, "cm", namespace=kube_namespace)
    out = await fin.run(held, apply=lambda b: None, cleanup=lambda b: "ok")
    assert (out.event, out.value) == (kube.FinalizerEvent.CLEANED_UP, "ok")
    with pytest.raises(kube.ObjectNotFound):
        await kube.get(kube_api, CONFIGMAPS, "cm", namespace=kube_namespace)


async def test_patch_status_writes_the_status_subresource_only(
    kube_api: Any, kube_namespace: str, apply_manifest: ApplyManifest
) -> None:
    obj = await new_gizmo(apply_manifest, "g4", size=3)
    conditions = kube.set_condition([], "Ready", True, reason="Provisioned", observed_generation=1)
    out = await kube.patch_status(
        kube_api,
        GIZMOS,
        "g4",
        {"observedGeneration": 1, "conditions": conditions},
        namespace=kube_namespace,
    )
    assert out["status"]["observedGeneration"] == 1
    assert out["status"]["conditions"][0]["type"] == "Ready"
    assert out["status"]["conditions"][0]["status"] == "True"
    # A status write does not change the generation (the generation predicate filters it).
    assert out["metadata"]["generation"] == obj["metadata"]["generation"] == 1
    assert out["spec"] == {"size": 3}

    # Merge semantics: None removes a key, others stay.
    out = await kube.patch_status(
        kube_api,
        GIZMOS,
        "g4",
        {"observedGeneration": None, "phase": "Ready"},
        namespace=kube_namespace,
    )
    assert out["status"].get("observedGeneration") is None
    assert out["status"]["phase"] == "Ready"

    # Conditional on a resourceVersion: a stale one conflicts.
    with pytest.raises(kube.WriteConflict) as e:
        await kube.patch_status(
            kube_api,
            GIZMOS,
            "g4",
            {"phase": "Lost"},
            namespace=kube_namespace,
            resource_version=obj["metadata"]["resourceVersion"],
        )
    assert e.value.status == 409
    assert e.value.reason == "Conflict"
    current = out["metadata"]["resourceVersion"]
    out = await kube.patch_status(
        kube_api,
        GIZMOS,
        "g4",
        {"phase": "Kept"},
        namespace=kube_namespace,
        resource_version=current,
    )
    assert out["status"]["phase"] == "Kept"

    with pytest.raises(kube.ObjectNotFound):
        await kube.patch_status(kube_api, GIZMOS, "missing", {"a": 1}, namespace=kube_namespace)


def test_set_condition_keeps_the_transition_time_while_the_status_holds() -> None:
    old = [{"type": "Ready", "status": "True", "reason": "A", "lastTransitionTime": "T0"}]
    same = kube.set_condition(old, "Ready", "True", reason="B", message="m")
    assert same == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "B",
            "message": "m",
            "lastTransitionTime": "T0",
        }
    ]
    flipped = kube.set_condition(same, "Ready", False, reason="Broken")
    assert flipped[0]["status"] == "False"
    assert flipped[0]["lastTransitionTime"] != "T0"
    both = kube.set_condition(flipped, "Degraded", "Unknown", reason="Checking")
    assert [c["type"] for c in both] == ["Ready", "Degraded"]
    with pytest.raises(ValueError, match="status must be"):
        kube.set_condition([], "Ready", "yes", reason="X")
    with pytest.raises(ValueError, match="reason"):
        kube.set_condition([], "Ready", True, reason="")


async def test_server_side_apply_owns_fields_and_conflicts_without_force(
    kube_api: Any, kube_namespace: str
) -> None:
    def cm(value: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": kube_namespace},
            "data": {"key": value},
        }

    created = await kube.apply(kube_api, cm("one"), field_manager="ctl-a")
    assert created["data"] == {"key": "one"}
    managers = {m["manager"]: m["operation"] for m in created["metadata"]["managedFields"]}
    assert managers == {"ctl-a": "Apply"}

    # Same manager: an update. Another manager on the same field: a 409 conflict ...
    assert (await kube.apply(kube_api, cm("two"), field_manager="ctl-a"))["data"]["key"] == "two"
    with pytest.raises(kube.WriteConflict) as e:
        await kube.apply(kube_api, cm("three"), field_manager="ctl-b")
    assert e.value.status == 409
    assert "ctl-a" in str(e.value)
    # ... unless it forces, and then it owns the field.
    forced = await kube.apply(kube_api, cm("three"), field_manager="ctl-b", force=True)
    assert forced["data"]["key"] == "three"
    assert {m["manager"] for m in forced["metadata"]["managedFields"]} == {"ctl-b"}

    # Status through the status subresource, by apply.
    gizmo_status = {
        "apiVersion": GIZMOS.api_version,
        "kind": "Gizmo",
        "metadata": {"name": "g5", "namespace": kube_namespace},
        "status": {"phase": "Applied"},
    }
    await kube.apply_manifest(kube_api, GIZMO_CRD)
    await kube.apply(
        kube_api, {**gizmo_status, "status": None, "spec": {"size": 1}}, field_manager="ctl-a"
    )
    out = await kube.apply(kube_api, gizmo_status, field_manager="ctl-a", subresource="status")
    assert out["status"] == {"phase": "Applied"}


async def test_apply_manifest_applies_yaml_files_with_crds_and_their_objects(
    kube_api: Any, kube_namespace: str, apply_manifest: ApplyManifest, tmp_path: Path
) -> None:
    crd = GIZMO_CRD["metadata"]["name"]
    path = tmp_path / "all.yaml"
    path.write_text(
        f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: from-file}}
data: {{a: "1"}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {crd}}}
spec: {GIZMO_CRD["spec"]}
---
apiVersion: {GIZMOS.api_version}
kind: Gizmo
metadata: {{name: from-file}}
spec: {{size: 7}}
"""
    )
    objs = await apply_manifest(path)
    assert [o["kind"] for o in objs] == ["ConfigMap", "CustomResourceDefinition", "Gizmo"]
    assert objs[0]["metadata"]["namespace"] == kube_namespace
    assert "namespace" not in objs[1]["metadata"]
    gizmo = await kube.get(kube_api, GIZMOS, "from-file", namespace=kube_namespace)
    assert gizmo["spec"] == {"size": 7}
    # The path as a string works too, and applying again is a no-op update.
    again = await apply_manifest(str(path))
    assert again[2]["metadata"]["resourceVersion"] == gizmo["metadata"]["resourceVersion"]


async def test_discovery_and_dynamic_resources_name_the_same_resource(kube_api: Any) -> None:
    deployments = await kube.discover(kube_api, "apps/v1", "Deployment")
    assert deployments == kube.Resource("apps/v1", "Deployment", "deployments", namespaced=True)
    namespaces = await kube.discover(kube_api, "v1", "Namespace")
    assert not namespaces.namespaced
    assert namespaces.path("x") == "/api/v1/namespaces/x"
    dyn = await DynamicClient(kube_api)
    from_dyn = kube.Resource.from_dynamic(
        await dyn.resources.get(api_version="apps/v1", kind="Deployment")
    )
    assert from_dyn == deployments
    with pytest.raises(kube.ObjectNotFound, match="Deploymint"):
        await kube.discover(kube_api, "apps/v1", "Deploymint")


async def test_bad_input_gets_clear_errors_naming_the_argument(kube_api: Any) -> None:
    with pytest.raises(ValueError, match="Finalizer name"):
        kube.Finalizer(kube_api, GIZMOS, "cleanup")
    with pytest.raises(ValueError, match=r"Resource\.plural"):
        kube.Resource("v1", "ConfigMap", "")
    for bad in ("a/b/c", "/v1", "apps/", ""):
        with pytest.raises(ValueError, match=r"Resource\.api_version"):
            kube.Resource(bad, "ConfigMap", "configmaps")
    with pytest.raises(ValueError, match="namespace: ConfigMap is namespaced"):
        CONFIGMAPS.path("x")
    with pytest.raises(ValueError, match="field_manager"):
        await kube.apply(kube_api, {"apiVersion": "v1"}, field_manager="")
    with pytest.raises(ValueError, match=r"manifest\.metadata\.name"):
        await kube.apply(
            kube_api, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, field_manager="x"
        )
    with pytest.raises(ValueError, match="pass namespace="):
        await kube.apply_manifest(
            kube_api, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
        )
    with pytest.raises(ValueError, match="propagation_policy"):
        await kube.delete(kube_api, CONFIGMAPS, "x", namespace="y", propagation_policy="Later")
    with pytest.raises(TypeError, match="status must be a mapping"):
        await kube.patch_status(kube_api, GIZMOS, "x", [], namespace="y")  # type: ignore[arg-type]


async def test_the_kube_fixtures_run_informerd_against_the_real_server(
    informerd_kube_client: informerd.Client,
    apply_manifest: ApplyManifest,
    kube_namespace: str,
) -> None:
    """informerd_kube_client reaches a daemon on kube_apiserver: a CRD and an object applied
    after the daemon started are served by an informer."""
    await new_gizmo(apply_manifest, "served", size=2)
    gizmos = await informerd_kube_client.informers.ensure(
        GIZMOS.api_version, "Gizmo", namespace=kube_namespace
    )
    info = await gizmos.wait_for_sync(timeout_s=60)
    assert info.state.objects == 1
    obj = await gizmos.get(f"{kube_namespace}/served")
    assert obj is not None
    assert obj.body["spec"] == {"size": 2}


async def test_an_unreachable_or_silent_api_server_fails_within_the_deadline() -> None:
    from kubernetes_asyncio.client import ApiClient, Configuration

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(1 << 16):  # reads the request, answers nothing, until EOF
            pass
        writer.close()

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    try:
        for host, error in (
            (f"http://127.0.0.1:{refused_port}", informerd.Unavailable),
            (f"http://127.0.0.1:{port}", informerd.Timeout),
        ):
            config = Configuration(host=host)
            async with ApiClient(config) as api:
                started = time.monotonic()
                with pytest.raises(error, match="GET /api/v1/namespaces/x/configmaps/y"):
                    await kube.get(api, CONFIGMAPS, "y", namespace="x", timeout_s=1.0)
                assert time.monotonic() - started < 30
    finally:
        silent.close()
        await silent.wait_closed()
