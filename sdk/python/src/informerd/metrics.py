"""Prometheus metrics of the controller runtime, with controller-runtime's names and labels.

Dashboards and alerts written for controller-runtime work unchanged:
``controller_runtime_reconcile_total{controller,result}`` (result: success, error, requeue,
requeue_after), ``controller_runtime_reconcile_errors_total{controller}``,
``controller_runtime_terminal_reconcile_errors_total{controller}``,
``controller_runtime_reconcile_time_seconds{controller}``,
``controller_runtime_active_workers{controller}``,
``controller_runtime_max_concurrent_reconciles{controller}``. The SDK adds
``informerd_sdk_work_refusals_total{controller,reason}`` (outcomes the daemon refused) and
``informerd_sdk_work_reconnects_total{controller}`` (reconnect attempts after a lost stream).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# controller-runtime's reconcile_time_seconds buckets (0.005 s .. 60 s).
_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.25,
    1.5,
    1.75,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5,
    6,
    7,
    8,
    9,
    10,
    15,
    20,
    25,
    30,
    40,
    50,
    60,
)

RESULTS = ("success", "error", "requeue", "requeue_after")


class ReconcileTimes:
    """One controller's reconcile-time histogram as plain numbers: :meth:`observe` is a bisect
    and two additions (prometheus_client's Histogram takes two locks per observation)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)  # the last: above 60 s (+Inf)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, seconds)] += 1
        self.sum += seconds


class _ReconcileTimeCollector(Collector):
    """``controller_runtime_reconcile_time_seconds{controller}`` of every controller of a
    registry, read from their :class:`ReconcileTimes` when scraped."""

    def __init__(self) -> None:
        self.by_controller: dict[str, ReconcileTimes] = {}
        # floatToGoString: the "le" labels exactly as prometheus_client's Histogram writes them.
        self._bounds = [floatToGoString(b) for b in _BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            labels=["controller"],
        )
        for controller, times in list(self.by_controller.items()):
            counts, total = list(times.counts), times.sum
            cumulative, buckets = 0, []
            for bound, n in zip(self._bounds, counts, strict=True):
                cumulative += n
                buckets.append((bound, float(cumulative)))
            family.add_metric([controller], buckets, total)
        yield family


class _Collectors:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.reconcile_time = _ReconcileTimeCollector()
        registry.register(self.reconcile_time)
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.refusals = Counter(
            "informerd_sdk_work_refusals_total",
            "Outcomes and heartbeats the daemon refused (the key was no longer this worker's)",
            ["controller", "reason"],
            registry=registry,
        )
        self.reconnects = Counter(
            "informerd_sdk_work_reconnects_total",
            "Reconnect attempts after a Work stream broke",
            ["controller"],
            registry=registry,
        )
        self.abandoned = Gauge(
            "informerd_sdk_abandoned_reconciles",
            "Cancelled sync reconciles whose threads still run; no new work is taken meanwhile",
            ["controller"],
            registry=registry,
        )


_lock = threading.Lock()
_by_registry: dict[int, tuple[CollectorRegistry, _Collectors]] = {}


def _collectors(registry: CollectorRegistry) -> _Collectors:
    # One set of collectors per registry, shared by every controller of the process (a name may
    # be registered once per registry); controllers differ by their label.
    with _lock:
        entry = _by_registry.get(id(registry))
        if entry is None or entry[0] is not registry:
            entry = (registry, _Collectors(registry))
            _by_registry[id(registry)] = entry
        return entry[1]


class ControllerMetrics:
    """The series of one controller (label ``controller=name``) in ``registry``.

    The per-reconcile figures are kept cheaply: :attr:`active` is a plain int that the
    ``active_workers`` gauge reads when scraped, the reconcile times are plain numbers too
    (:class:`ReconcileTimes`), and :meth:`reconciled` counts results in plain ints that go to
    the prometheus counters once per event-loop tick (:meth:`flush`)."""

    def __init__(self, controller: str, registry: CollectorRegistry | None = None) -> None:
        c = _collectors(registry if registry is not None else REGISTRY)
        self._c = c
        self.controller = controller
        self.reconcile_total = {r: c.reconcile_total.labels(controller, r) for r in RESULTS}
        self.reconcile_errors = c.reconcile_errors.labels(controller)
        self.terminal_errors = c.terminal_errors.labels(controller)
        with _lock:
            self.reconcile_time = c.reconcile_time.by_controller.setdefault(
                controller, ReconcileTimes()
            )
        self.active_workers = c.active_workers.labels(controller)
        self.max_concurrent = c.max_concurrent.labels(controller)
        self.reconnects = c.reconnects.labels(controller)
        #: Cancelled sync reconciles still running (``informerd_sdk_abandoned_reconciles``).
        self.abandoned = c.abandoned.labels(controller)
        #: Reconciles running now (``controller_runtime_active_workers``).
        self.active = 0
        self.active_workers.set_function(lambda: self.active)
        self._results = dict.fromkeys(RESULTS, 0)
        self._flush_scheduled = False

    def reconciled(self, result: str, seconds: float) -> None:
        """Counts one reconcile (``result``: one of RESULTS) that took ``seconds``; the series
        are updated at the end of this loop tick. Call from the event loop's thread."""
        self._results[result] += 1
        self.reconcile_time.observe(seconds)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Applies what :meth:`reconciled` counted to the prometheus series."""
        self._flush_scheduled = False
        for result, n in self._results.items():
            if n:
                self.reconcile_total[result].inc(n)
                self._results[result] = 0

    def refused(self, reason: str) -> None:
        self._c.refusals.labels(self.controller, reason).inc()
