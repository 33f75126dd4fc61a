"""Kubernetes objects and credentials for the tests on the real kube-apiserver that run informerd
with authentication on (test_auth_kube.py, the chaos cluster): namespaces, ConfigMaps, RBAC
roles and bindings, service-account tokens from TokenRequest, and the token of a kubeconfig."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from informerd import kube

RBAC = "rbac.authorization.k8s.io/v1"


def kubeconfig_token(kubeconfig: Path) -> str:
    """The bearer token of the first user of ``kubeconfig`` (testing/kube's static users)."""
    token: str = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    return token


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def configmap(
    ns: str,
    name: str,
    labels: Mapping[str, str] | None = None,
    data: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
        "data": dict(data) if data is not None else {"k": name},
    }


def role(
    ns: str, name: str, resources: Sequence[str], verbs: Sequence[str] = ("list", "watch")
) -> dict[str, Any]:
    """A Role in ``ns`` granting ``verbs`` on core-group ``resources``."""
    return {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": list(resources), "verbs": list(verbs)}],
    }


def queue_role(name: str, queues: Sequence[str], verbs: Sequence[str]) -> dict[str, Any]:
    """A ClusterRole granting ``verbs`` on informerd's queues named ``queues`` (queues are
    cluster-scoped ``queues.informerd.io``; ``work`` takes work from one)."""
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["informerd.io"],
                "resources": ["queues"],
                "resourceNames": list(queues),
                "verbs": list(verbs),
            }
        ],
    }


def binding(
    ns: str, name: str, role_name: str, subjects: Sequence[Mapping[str, str]], *, cluster: bool
) -> dict[str, Any]:
    """A RoleBinding in ``ns`` (a ClusterRoleBinding when ``cluster``) of ``role_name`` (a Role in
    ``ns``, or a ClusterRole when ``cluster``)."""
    meta: dict[str, str] = {"name": name}
    if not cluster:
        meta["namespace"] = ns
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding" if cluster else "RoleBinding",
        "metadata": meta,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole" if cluster else "Role",
            "name": role_name,
        },
        "subjects": [dict(s) for s in subjects],
    }


def service_account(ns: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def group(name: str) -> dict[str, str]:
    return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}


async def sa_token(
    kapi: Any, ns: str, name: str, *, audiences: Sequence[str] = (), seconds: int = 3600
) -> str:
    """A new token of service account ``ns/name`` (created if missing), from TokenRequest."""
    await kube.apply_manifest(
        kapi,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        namespace=ns,
    )
    answer = await kube.request(
        kapi,
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": list(audiences), "expirationSeconds": seconds},
        },
    )
    token: str = answer["status"]["token"]
    return token
