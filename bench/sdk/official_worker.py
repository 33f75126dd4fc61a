"""A controller on the official ``kubernetes`` client, as its users write it: a plain
``kubernetes.watch.Watch`` on the namespace's ConfigMaps (its first events list what exists),
the objects kept in a dict (the replica's own cache), and a reconcile per event.

    official_worker.py --kubeconfig PATH --namespace NS

Each reconcile is a no-op that prints ``seen KEY`` the first time it sees a key. Runs until
killed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    args = p.parse_args()
    config.load_kube_config(config_file=args.kubeconfig)
    core = client.CoreV1Api()
    cache: dict[str, Any] = {}
    seen: set[str] = set()

    def reconcile(key: str, obj: Any) -> None:
        if key not in seen:
            seen.add(key)
            proc.emit_seen([key])

    proc.emit(proc.READY)
    while True:  # a watch ends at the server's timeout; start it again, as users do
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, namespace=args.namespace
        ):
            obj = event["object"]
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            if event["type"] == "DELETED":
                cache.pop(key, None)
            else:
                cache[key] = obj
            reconcile(key, obj)


if __name__ == "__main__":
    main()
