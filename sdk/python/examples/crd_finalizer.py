"""Example: a CRD controller with a finalizer and a status.

``Widget`` objects (``example.informerd.io/v1``, the CRD below) each hold an entry in a shared
ConfigMap, ``widget-inventory`` — something the garbage collector cannot clean up for us, hence
the finalizer. The reconcile:

- on a live Widget: adds the finalizer (first reconcile), writes ``data.<widget>: <spec.size>``
  into the inventory by server-side apply (each Widget has its own field manager, so each owns
  its own key), then patches the status: ``observedGeneration`` and a ``Ready`` condition. The
  status write does not change ``metadata.generation``, and the controller's generation
  predicate drops updates that leave it unchanged: the status write does not wake it again.
- on a Widget being deleted: applies the Widget's manager's intent without its key (server-side
  apply removes the field it owned), then removes the finalizer, and the API server deletes the
  Widget.

    python -m examples.crd_finalizer --target 127.0.0.1:7470 --kubeconfig ~/.kube/config \\
        --namespace demo
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kubernetes_asyncio.client import ApiClient

import informerd
from examples import _cli
from informerd import Context, Controller, KubeObject, Result, kube
from informerd.queues import generation_changed

GROUP = "example.informerd.io"
WIDGETS = kube.Resource(f"{GROUP}/v1", "Widget", "widgets")
FINALIZER = f"{GROUP}/inventory"
INVENTORY = "widget-inventory"

WIDGET_CRD = f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{GROUP}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {{type: integer, minimum: 0}}
          status:
            type: object
            properties:
              observedGeneration: {{type: integer}}
              conditions:
                type: array
                items:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
"""


async def install_crd(api: ApiClient) -> None:
    """Applies the Widget CRD and waits until it is served."""
    await kube.apply_manifest(api, WIDGET_CRD, field_manager="widget-example")


class WidgetController:
    """The controller; :meth:`run` runs it until :meth:`stop` (or SIGTERM/SIGINT).
    ``options`` go to :class:`informerd.Controller` (``concurrency``, ``registry`` ...)."""

    def __init__(
        self, client: informerd.Client, api: ApiClient, namespace: str, **options: Any
    ) -> None:
        options.setdefault("concurrency", 2)
        self.api = api
        self.finalizer = kube.Finalizer(api, WIDGETS, FINALIZER)
        self.controller = Controller("widgets", client, **options).for_(
            WIDGETS.api_version, "Widget", namespace=namespace, predicates=[generation_changed()]
        )
        #: The generations each Widget was reconciled at, by key; what each reconcile did.
        self.reconciled: dict[str, list[int]] = defaultdict(list)
        self.events: dict[str, list[kube.FinalizerEvent]] = defaultdict(list)

    async def reconcile(self, obj: KubeObject | None, ctx: Context) -> Result | None:
        if obj is None:
            return None  # gone: the finalizer made sure its cleanup ran
        self.reconciled[ctx.key].append(obj.generation)
        outcome = await self.finalizer.run(obj, apply=self.provision, cleanup=self.release)
        self.events[ctx.key].append(outcome.event)
        ctx.logger.info("%s (finalizer added: %s)", outcome.event.value, outcome.added)
        return None

    def _inventory(self, widget: dict[str, Any], data: dict[str, str] | None) -> dict[str, Any]:
        meta = widget["metadata"]
        manifest: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": INVENTORY, "namespace": meta["namespace"]},
        }
        if data is not None:
            manifest["data"] = data
        return manifest

    async def provision(self, widget: dict[str, Any]) -> None:
        meta = widget["metadata"]
        name, generation = meta["name"], meta["generation"]
        await kube.apply(
            self.api,
            self._inventory(widget, {name: str(widget["spec"]["size"])}),
            field_manager=f"widget-{name}",
            force=True,
        )
        conditions = kube.set_condition(
            (widget.get("status") or {}).get("conditions") or [],
            "Ready",
            True,
            reason="Provisioned",
            message=f"inventory entry {name}={widget['spec']['size']}",
            observed_generation=generation,
        )
        await kube.patch_status(
            self.api,
            WIDGETS,
            name,
            {"observedGeneration": generation, "conditions": conditions},
            namespace=meta["namespace"],
        )

    async def release(self, widget: dict[str, Any]) -> None:
        # The Widget's manager applies an intent without its key: the API server removes it.
        await kube.apply(
            self.api,
            self._inventory(widget, None),
            field_manager=f"widget-{widget['metadata']['name']}",
            force=True,
        )

    async def run(self, *, shutdown_on_signal: bool = False) -> None:
        await self.controller.run(self.reconcile, shutdown_on_signal=shutdown_on_signal)

    def stop(self) -> None:
        self.controller.stop()


async def build(client: informerd.Client, api: ApiClient, namespace: str) -> WidgetController:
    await install_crd(api)
    return WidgetController(client, api, namespace)


def main(argv: list[str] | None = None) -> None:
    _cli.main(__doc__ or "", build, argv)


if __name__ == "__main__":
    main()
