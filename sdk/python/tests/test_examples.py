"""The examples, run in-process against informerd on the real kube-apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from prometheus_client import CollectorRegistry

import informerd
from examples import configmap_hash, crd_finalizer
from informerd import kube
from informerd.testing import Daemon, KubeApiServer, eventually
from informerd.testing.pki import KeyPair, Pki
from informerd.testing.plugin import ApplyManifest
from tests.rbac import binding, queue_role, sa_token, service_account, user

DEADLINE_S = 60.0
SDK = Path(__file__).resolve().parents[1]


class Example(Protocol):
    async def run(self, *, shutdown_on_signal: bool = False) -> None: ...

    def stop(self) -> None: ...


@contextlib.asynccontextmanager
async def running(example: Example) -> AsyncIterator[None]:
    """Runs the example's controller in a task; stops it (a drain) and checks it returned."""
    task = asyncio.create_task(example.run())
    try:
        yield
    finally:
        example.stop()
        await asyncio.wait_for(task, 60)


def deployment(name: str, *configmaps: str) -> dict[str, Any]:
    volumes = [{"name": f"v-{cm}", "configMap": {"name": cm}} for cm in configmaps]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example/app:1"}],
                    "volumes": volumes,
                },
            },
        },
    }


def configmap(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    }


class HashFixture:
    """The configmap_hash example running on cm-a, cm-b and Deployments d-a (mounts cm-a), d-b
    (cm-b), d-ab (both) and d-none (no ConfigMap), with helpers to look at the result."""

    names = ("d-a", "d-b", "d-ab", "d-none")

    def __init__(self, example: configmap_hash.ConfigMapHash, api: Any, namespace: str) -> None:
        self.example = example
        self.api = api
        self.ns = namespace

    async def get(self, name: str) -> dict[str, Any]:
        return await kube.get(self.api, configmap_hash.DEPLOYMENTS, name, namespace=self.ns)

    async def hash_of(self, name: str) -> str | None:
        template = (await self.get(name))["spec"]["template"]["metadata"]
        value = (template.get("annotations") or {}).get(configmap_hash.ANNOTATION)
        return value if isinstance(value, str) else None

    async def hashes(self) -> dict[str, str | None]:
        return {name: await self.hash_of(name) for name in self.names}

    async def settled(self, names: tuple[str, ...]) -> bool:
        """Each Deployment was reconciled at its current generation (after our own write)."""
        for name in names:
            generation = (await self.get(name))["metadata"]["generation"]
            if generation not in self.example.reconciled.get(f"{self.ns}/{name}", []):
                return False
        return True

    async def annotated(self) -> bool:
        h = await self.hashes()
        return all(h[n] for n in ("d-a", "d-b", "d-ab")) and await self.settled(self.names)


@pytest.fixture
async def configmap_hash_running(
    informerd_kube_client: informerd.Client,
    kube_api: Any,
    kube_namespace: str,
    apply_manifest: ApplyManifest,
) -> AsyncIterator[HashFixture]:
    await apply_manifest([configmap("cm-a", "1"), configmap("cm-b", "1")])
    await apply_manifest(
        [
            deployment("d-a", "cm-a"),
            deployment("d-b", "cm-b"),
            deployment("d-ab", "cm-a", "cm-b"),
            deployment("d-none"),
        ]
    )
    example = configmap_hash.ConfigMapHash(
        informerd_kube_client, kube_api, kube_namespace, registry=CollectorRegistry()
    )
    state = HashFixture(example, kube_api, kube_namespace)
    async with running(example):
        await eventually(
            state.annotated,
            "every Deployment that mounts a ConfigMap is annotated",
            timeout_s=DEADLINE_S,
        )
        yield state


async def test_configmap_hash_annotates_the_deployments_that_mount_configmaps(
    configmap_hash_running: HashFixture,
) -> None:
    state = configmap_hash_running
    before = await state.hashes()
    assert before["d-none"] is None
    assert len({before["d-a"], before["d-b"], before["d-ab"]}) == 3
    # Our own write bumped each generation once; the reconcile at the new one wrote nothing.
    for name in ("d-a", "d-b", "d-ab"):
        assert (await state.get(name))["metadata"]["generation"] == 2
    assert await state.hashes() == before


async def test_configmap_hash_reannotates_exactly_the_deployments_that_mount_a_changed_configmap(
    configmap_hash_running: HashFixture, apply_manifest: ApplyManifest
) -> None:
    state = configmap_hash_running
    before = await state.hashes()
    d_b = await state.get("d-b")
    d_b_reconciles = list(state.example.reconciled[f"{state.ns}/d-b"])

    # Changing cm-a re-annotates d-a and d-ab, and leaves d-b alone.
    await apply_manifest(configmap("cm-a", "2"))

    async def reannotated() -> bool:
        h = await state.hashes()
        changed = h["d-a"] != before["d-a"] and h["d-ab"] != before["d-ab"]
        return changed and await state.settled(("d-a", "d-ab"))

    await eventually(reannotated, "d-a and d-ab carry the new hash", timeout_s=30)
    after = await state.hashes()
    assert after["d-b"] == before["d-b"]
    assert after["d-none"] is None
    assert state.example.reconciled[f"{state.ns}/d-b"] == d_b_reconciles
    assert (await state.get("d-b"))["metadata"]["resourceVersion"] == d_b["metadata"][
        "resourceVersion"
    ]


async def test_crd_finalizer_adds_writes_status_and_cleans_up(
    informerd_kube_client: informerd.Client,
    kube_api: Any,
    kube_namespace: str,
    apply_manifest: ApplyManifest,
) -> None:
    ns = kube_namespace
    widgets = crd_finalizer.WIDGETS
    configmaps = kube.Resource("v1", "ConfigMap", "configmaps")
    await crd_finalizer.install_crd(kube_api)
    # concurrency=1: the queue hands keys out in order, so once a later key was reconciled,
    # any re-trigger of an earlier one would have been seen.
    example = crd_finalizer.WidgetController(
        informerd_kube_client, kube_api, ns, concurrency=1, registry=CollectorRegistry()
    )

    def widget(name: str, size: int) -> dict[str, Any]:
        return {
            "apiVersion": widgets.api_version,
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"size": size},
        }

    async def inventory() -> dict[str, str]:
        try:
            cm = await kube.get(kube_api, configmaps, crd_finalizer.INVENTORY, namespace=ns)
        except kube.ObjectNotFound:
            return {}
        return dict(cm.get("data") or {})

    async def observed(name: str, generation: int) -> bool:
        w = await kube.get(kube_api, widgets, name, namespace=ns)
        status = w.get("status") or {}
        return status.get("observedGeneration") == generation

    async with running(example):
        await apply_manifest(widget("w1", 3))
        await eventually(
            lambda: observed("w1", 1), "w1's status observes generation 1", timeout_s=DEADLINE_S
        )
        w1 = await kube.get(kube_api, widgets, "w1", namespace=ns)
        assert w1["metadata"]["finalizers"] == [crd_finalizer.FINALIZER]
        [ready] = w1["status"]["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Provisioned")
        assert ready["observedGeneration"] == 1
        assert await inventory() == {"w1": "3"}

        await apply_manifest(widget("w1", 5))
        await eventually(
            lambda: observed("w1", 2), "w1's status observes generation 2", timeout_s=DEADLINE_S
        )
        assert await inventory() == {"w1": "5"}
        await apply_manifest(widget("w2", 1))
        await eventually(
            lambda: observed("w2", 1), "w2's status observes generation 1", timeout_s=DEADLINE_S
        )
        # Neither the finalizer nor the status writes woke the controller again: w1 was
        # reconciled once per generation.
        assert example.reconciled[f"{ns}/w1"] == [1, 2]
        assert example.events[f"{ns}/w1"] == [kube.FinalizerEvent.APPLIED] * 2
        assert await inventory() == {"w1": "5", "w2": "1"}

        # Deletion: the finalizer holds w1 until its inventory entry is gone.
        await kube.delete(kube_api, widgets, "w1", namespace=ns)

        async def w1_gone() -> bool:
            try:
                await kube.get(kube_api, widgets, "w1", namespace=ns)
            except kube.ObjectNotFound:
                return True
            return False

        await eventually(w1_gone, "w1 is deleted", timeout_s=DEADLINE_S)
        assert await inventory() == {"w2": "1"}
        assert example.events[f"{ns}/w1"][-1] is kube.FinalizerEvent.CLEANED_UP
        assert (await kube.get(kube_api, widgets, "w2", namespace=ns))["metadata"]["finalizers"]


@dataclass
class Secure:
    """informerd as deployed, on the real kube-apiserver: TLS, every call authenticated
    (service-account tokens by TokenReview, client certificates of its client CA) and
    authorized by SubjectAccessReview."""

    daemon: Daemon
    pki: Pki
    ca: KeyPair
    client_ca: KeyPair


@pytest.fixture(scope="module")
def secure(
    kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secure]:
    d = tmp_path_factory.mktemp("examples-secure")
    pki = Pki(d / "pki")
    ca = pki.ca("ca")
    server = pki.server_cert("server", ca)
    client_ca = pki.ca("client-ca")
    (d / "daemon").mkdir()
    with Daemon.start(
        kube_apiserver.kubeconfig,
        d / "daemon",
        extra_args=[
            f"--tls-cert={server.cert}",
            f"--tls-key={server.key}",
            f"--tls-client-ca={client_ca.cert}",
        ],
        insecure=False,
    ) as daemon:
        yield Secure(daemon, pki, ca, client_ca)


def example_rbac(ns: str, subject: dict[str, str], queue: str) -> list[dict[str, Any]]:
    """What an example needs of informerd: reading its resources in ``ns`` (list and watch) and
    working its queue — the least a user binds for it."""
    reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "example-reader", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
            {
                "apiGroups": [crd_finalizer.GROUP],
                "resources": ["widgets"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    return [
        reader,
        binding(ns, "example-reader", "example-reader", [subject], cluster=False),
        queue_role(f"example-{ns}", [queue], ["get", "work", "update", "create"]),
        binding("", f"example-{ns}", f"example-{ns}", [subject], cluster=True),
    ]


async def widget_reconciled(api: Any, ns: str, apply_manifest: ApplyManifest) -> None:
    widget = {
        "apiVersion": crd_finalizer.WIDGETS.api_version,
        "kind": "Widget",
        "metadata": {"name": "from-main"},
        "spec": {"size": 2},
    }
    await apply_manifest(widget)  # waits until the program has installed the CRD

    async def ready() -> bool:
        w = await kube.get(api, crd_finalizer.WIDGETS, "from-main", namespace=ns)
        return (w.get("status") or {}).get("observedGeneration") == 1

    await eventually(ready, "the program reconciled the Widget", timeout_s=DEADLINE_S)


async def deployment_annotated(api: Any, ns: str, apply_manifest: ApplyManifest) -> None:
    await apply_manifest([configmap("cm-main", "1"), deployment("d-main", "cm-main")])

    async def annotated() -> bool:
        d = await kube.get(api, configmap_hash.DEPLOYMENTS, "d-main", namespace=ns)
        annotations = d["spec"]["template"]["metadata"].get("annotations") or {}
        return configmap_hash.ANNOTATION in annotations

    await eventually(annotated, "the program annotated the Deployment", timeout_s=DEADLINE_S)


@pytest.mark.parametrize("credential", ["token", "mtls"])
@pytest.mark.parametrize(
    ("module", "queue", "reconciled"),
    [
        ("crd_finalizer", "widgets", widget_reconciled),
        ("configmap_hash", "configmap-hash", deployment_annotated),
    ],
)
async def test_an_example_runs_as_a_program_with_authentication_on_and_drains_on_sigterm(
    module: str,
    queue: str,
    reconciled: Callable[[Any, str, ApplyManifest], Awaitable[None]],
    credential: str,
    secure: Secure,
    kube_apiserver: KubeApiServer,
    kube_api: Any,
    kube_namespace: str,
    apply_manifest: ApplyManifest,
    tmp_path: Path,
) -> None:
    """``python -m examples.<module>`` as the README runs it against informerd's default,
    authentication on: over TLS with a service account's token file, or with a client
    certificate, bound to what it needs; it reconciles, and exits 0 on SIGTERM."""
    ns = kube_namespace
    if credential == "token":
        subject = service_account(ns, "example")
        token_file = tmp_path / "token"
        token_file.write_text(await sa_token(kube_api, ns, "example"))
        flags = ["--token-file", str(token_file)]
    else:
        subject = user(f"example-{ns}")
        cert = secure.pki.client_cert(f"example-{ns}", secure.client_ca, f"example-{ns}")
        flags = ["--cert-file", str(cert.cert), "--key-file", str(cert.key)]
    await kube.apply_manifest(kube_api, example_rbac(ns, subject, queue))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SDK), env.get("PYTHONPATH")) if p)
    log_path = tmp_path / "example.log"
    log = log_path.open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"examples.{module}",
        "--target",
        secure.daemon.target,
        "--ca-file",
        str(secure.ca.cert),
        *flags,
        "--kubeconfig",
        str(kube_apiserver.kubeconfig),
        "--namespace",
        ns,
        cwd=SDK,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        await reconciled(kube_api, ns, apply_manifest)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
    output = log_path.read_text()
    assert "SIGTERM: draining" in output, output[-2000:]
