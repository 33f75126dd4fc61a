"""Example: stamp Deployments with a hash of the ConfigMaps they mount, so that a changed
ConfigMap rolls exactly the Deployments that use it.

The controller reconciles Deployments (``for_``, with the generation predicate: status updates
from the Deployment controller do not wake it) and watches ConfigMaps through an index on the
Deployment informer: ``configmaps`` indexes each Deployment by the names of the ConfigMaps its
pod template mounts, and a ConfigMap event enqueues the Deployments whose index holds its name.
Reads come from informerd's caches; the one write is a server-side apply of the pod template's
annotation ``informerd.io/configmap-hash`` (a changed pod template makes the Deployment roll).
The annotation changes the Deployment's generation, so each write is followed by one more
reconcile, which finds the hash current and writes nothing.

    python -m examples.configmap_hash --target 127.0.0.1:7470 --kubeconfig ~/.kube/config \\
        --namespace demo
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from kubernetes_asyncio.client import ApiClient

import informerd
from examples import _cli
from informerd import Context, Controller, KubeObject, Result, kube
from informerd.informers import Informer, field_index
from informerd.queues import generation_changed

ANNOTATION = "informerd.io/configmap-hash"
FIELD_MANAGER = "configmap-hash"
DEPLOYMENTS = kube.Resource("apps/v1", "Deployment", "deployments")


def mounted_configmaps(deployment: dict[str, Any]) -> list[str]:
    """The names of the ConfigMaps a Deployment's pod template mounts as volumes."""
    volumes = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("volumes") or []
    return sorted({v["configMap"]["name"] for v in volumes if v.get("configMap", {}).get("name")})


class ConfigMapHash:
    """The controller; :meth:`run` runs it until :meth:`stop` (or SIGTERM/SIGINT).
    ``options`` go to :class:`informerd.Controller` (``concurrency``, ``registry`` ...)."""

    def __init__(
        self, client: informerd.Client, api: ApiClient, namespace: str, **options: Any
    ) -> None:
        options.setdefault("concurrency", 2)
        self.client = client
        self.api = api
        self.namespace = namespace
        self.controller = Controller("configmap-hash", client, **options)
        self.controller.for_(
            "apps/v1",
            "Deployment",
            namespace=namespace,
            predicates=[generation_changed()],
            indexes={"configmaps": field_index("spec.template.spec.volumes.configMap.name")},
        )
        self.controller.watches("v1", "ConfigMap", index="configmaps", value_from="name")
        self.configmaps: Informer | None = None
        #: The generations each Deployment was reconciled at, by key (for tests and curiosity).
        self.reconciled: dict[str, list[int]] = defaultdict(list)

    async def reconcile(self, obj: KubeObject | None, ctx: Context) -> Result | None:
        if obj is None:
            return None  # deleted: nothing to clean up
        self.reconciled[ctx.key].append(obj.generation)
        names = mounted_configmaps(obj.body)
        if not names:
            return None
        assert self.configmaps is not None
        digest = hashlib.sha256()
        for name in names:
            cm = await self.configmaps.get(f"{obj.namespace}/{name}")
            content = (
                "-"
                if cm is None
                else json.dumps(
                    {"data": cm.body.get("data"), "binaryData": cm.body.get("binaryData")},
                    sort_keys=True,
                )
            )
            digest.update(f"{name}={content}\n".encode())
        value = digest.hexdigest()[:32]
        template = obj.body["spec"]["template"].get("metadata") or {}
        if (template.get("annotations") or {}).get(ANNOTATION) == value:
            return None
        ctx.logger.info("ConfigMaps %s hash to %s", ",".join(names), value)
        await kube.apply(
            self.api,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": obj.name, "namespace": obj.namespace},
                "spec": {"template": {"metadata": {"annotations": {ANNOTATION: value}}}},
            },
            field_manager=FIELD_MANAGER,
            force=True,
            resource=DEPLOYMENTS,
        )
        return None

    async def run(self, *, shutdown_on_signal: bool = False) -> None:
        # The same spec as the controller's ConfigMap informer: the same shared informer.
        self.configmaps = await self.client.informers.ensure(
            "v1", "ConfigMap", namespace=self.namespace
        )
        await self.controller.run(self.reconcile, shutdown_on_signal=shutdown_on_signal)

    def stop(self) -> None:
        self.controller.stop()


async def build(client: informerd.Client, api: ApiClient, namespace: str) -> ConfigMapHash:
    return ConfigMapHash(client, api, namespace)


def main(argv: list[str] | None = None) -> None:
    _cli.main(__doc__ or "", build, argv)


if __name__ == "__main__":
    main()
