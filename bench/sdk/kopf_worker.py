"""kopf's contender: an event handler on ConfigMaps, run as
``python -m kopf run --standalone --namespace NS kopf_worker.py`` with KUBECONFIG set.

``@kopf.on.event`` is kopf's handler that keeps no progress state on the object (on.create and
on.resume would patch an annotation per object: writes the other contenders do not make), and
posting k8s Events is off for the same reason. Each call is a no-op that prints ``seen KEY`` the
first time it sees a key.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kopf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc

_seen: set[str] = set()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False


@kopf.on.event("v1", "configmaps")
async def reconcile(namespace: str | None, name: str, **_: Any) -> None:
    key = f"{namespace}/{name}"
    if key not in _seen:
        _seen.add(key)
        proc.emit_seen([key])
