"""The alert rules and dashboard (deploy/helm/informerd/files) against a real daemon: every
metric the alert rules and the Grafana dashboard query is one the daemon exports (after an
informer, a queue and a worker exist), so a renamed metric cannot leave an alert that never
fires. promtool checks the rules themselves (tools/check_monitoring)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml

import informerd
from informerd.queues import object_source, queue_spec
from informerd.testing import Daemon, FakeApiServer, eventually
from informerd.testing.processes import repo_root
from informerd.work import Outcome, WorkStream

MONITORING = (repo_root() or Path.cwd()) / "deploy" / "helm" / "informerd" / "files"
# Prometheus's own series and PromQL words, which are not informerd's metrics.
NOT_METRICS = {
    "up",
    "by",
    "without",
    "and",
    "or",
    "unless",
    "on",
    "ignoring",
    "bool",
    "le",
    "vector",
    "rate",
    "increase",
    "deriv",
    "sum",
    "max",
    "min",
    "count",
    "histogram_quantile",
    "label_values",
}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (identifiers followed by { or [ or standing alone,
    minus functions, keywords, label names and strings)."""
    expr = re.sub(r"label_values\(([^,()]+(?:\{[^}]*\})?),[^)]*\)", r"\1", expr)  # its labels
    expr = re.sub(r'"[^"]*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n not in NOT_METRICS and not n.startswith("__")}


def queried_metrics() -> dict[str, set[str]]:
    """Metric name -> where it is queried."""
    found: dict[str, set[str]] = {}
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name in metric_names(rule["expr"]):
                found.setdefault(name, set()).add(f"alert {rule['alert']}")
    dash = json.loads((MONITORING / "informerd-dashboard.json").read_text())
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                found.setdefault(name, set()).add(f"panel {panel['title']!r}")
    for var in dash["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            for name in metric_names(query["query"]):
                found.setdefault(name, set()).add(f"variable {var['name']}")
    return found


def exported(metrics_url: str) -> set[str]:
    with urllib.request.urlopen(metrics_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_the_expression_parser_finds_metric_names() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (name, le) (rate(a_bucket{job=~"x"}[5m]))) > b'
    ) == {"a_bucket", "b"}
    assert metric_names('label_values(workqueue_depth{job=~"$job"}, name)') == {"workqueue_depth"}


async def test_every_metric_the_alerts_and_dashboard_query_is_exported(
    informerd_daemon: Daemon, informerd_client: informerd.Client, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.create_namespace("monitoring")
    fake_apiserver.put_configmap("monitoring", "cm", {"a": "b"})
    informer = await informerd_client.informers.ensure("v1", "ConfigMap", namespace="monitoring")
    await informer.wait_for_sync(timeout_s=30)
    await informerd_client.queues.create(queue_spec("monitoring-q", [object_source(informer.id)]))
    async with WorkStream(informerd_client, "monitoring-q", max_in_flight=1) as stream:
        leases = await stream.receive()
        assert leases
        stream.complete(leases[0], Outcome.SUCCESS)
        queried = queried_metrics()
        assert len(queried) >= 15

        # Informer series are refreshed on a timer: wait until they are all there.
        async def all_exported() -> bool:
            return not set(queried) - {"informerd_leader"} - exported(informerd_daemon.metrics_url)

        await eventually(all_exported, "every queried metric exported", 30, interval_s=0.2)
    missing = set(queried) - exported(informerd_daemon.metrics_url)
    # informerd_leader exists only in a replica set (leader election on).
    assert missing <= {"informerd_leader"}, {m: queried[m] for m in missing}
