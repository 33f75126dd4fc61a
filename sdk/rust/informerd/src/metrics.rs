//! Prometheus metrics of the controller runtime, with controller-runtime's names and labels, so
//! dashboards and alerts written for controller-runtime work unchanged:
//! `controller_runtime_reconcile_total{controller,result}` (result: success, error, requeue,
//! requeue_after), `controller_runtime_reconcile_errors_total{controller}`,
//! `controller_runtime_terminal_reconcile_errors_total{controller}`,
//! `controller_runtime_reconcile_time_seconds{controller}`,
//! `controller_runtime_active_workers{controller}` and
//! `controller_runtime_max_concurrent_reconciles{controller}`. The SDK adds
//! `informerd_sdk_work_refusals_total{controller,reason}` (outcomes the daemon refused) and
//! `informerd_sdk_work_reconnects_total{controller}` (reconnects after a lost Work stream).
//!
//! They are registered in the `prometheus` crate's default registry; [`register_in`] adds them to
//! another one. Serve them with `prometheus::TextEncoder`:
//!
//! ```
//! let text = prometheus::TextEncoder::new().encode_to_string(&prometheus::gather()).unwrap();
//! # let _ = text;
//! ```
use std::sync::OnceLock;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// controller-runtime's reconcile-time buckets.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

struct Families {
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    terminal_errors: IntCounterVec,
    reconcile_time: HistogramVec,
    active_workers: IntGaugeVec,
    max_concurrent: IntGaugeVec,
    refusals: IntCounterVec,
    reconnects: IntCounterVec,
}

impl Families {
    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.reconcile_total.clone()),
            Box::new(self.reconcile_errors.clone()),
            Box::new(self.terminal_errors.clone()),
            Box::new(self.reconcile_time.clone()),
            Box::new(self.active_workers.clone()),
            Box::new(self.max_concurrent.clone()),
            Box::new(self.refusals.clone()),
            Box::new(self.reconnects.clone()),
        ]
    }
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition")
        };
        let gauge = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &["controller"])
                .expect("a valid metric definition")
        };
        let f = Families {
            reconcile_total: counter(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            ),
            reconcile_errors: counter(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                &["controller"],
            ),
            terminal_errors: counter(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
                &["controller"],
            ),
            reconcile_time: HistogramVec::new(
                HistogramOpts::new(
                    "controller_runtime_reconcile_time_seconds",
                    "Length of time per reconciliation per controller",
                )
                .buckets(BUCKETS.to_vec()),
                &["controller"],
            )
            .expect("a valid metric definition"),
            active_workers: gauge(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            ),
            max_concurrent: gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            ),
            refusals: counter(
                "informerd_sdk_work_refusals_total",
                "Outcomes and heartbeats the daemon refused (the key was no longer this worker's)",
                &["controller", "reason"],
            ),
            reconnects: counter(
                "informerd_sdk_work_reconnects_total",
                "Reconnect attempts after a Work stream broke",
                &["controller"],
            ),
        };
        // A second registration (another copy of this crate in the process) is not an error
        // worth failing a controller for: the metrics still count, in this copy's collectors.
        let _ = register(prometheus::default_registry(), &f);
        f
    })
}

fn register(registry: &Registry, f: &Families) -> prometheus::Result<()> {
    for c in f.collectors() {
        registry.register(c)?;
    }
    Ok(())
}

/// Registers the controller metrics in `registry` as well (they are always in the default one).
pub fn register_in(registry: &Registry) -> prometheus::Result<()> {
    register(registry, families())
}

/// One controller's children of the metric families, resolved once (no label lookups per
/// reconcile).
#[derive(Clone)]
pub(crate) struct ControllerMetrics {
    pub success: IntCounter,
    pub error: IntCounter,
    pub requeue: IntCounter,
    pub requeue_after: IntCounter,
    pub errors: IntCounter,
    pub terminal_errors: IntCounter,
    pub time: Histogram,
    pub active: IntGauge,
    pub max_concurrent: IntGauge,
    pub reconnects: IntCounter,
    controller: String,
}

impl ControllerMetrics {
    pub fn new(controller: &str) -> Self {
        let f = families();
        let result = |r: &str| f.reconcile_total.with_label_values(&[controller, r]);
        ControllerMetrics {
            success: result("success"),
            error: result("error"),
            requeue: result("requeue"),
            requeue_after: result("requeue_after"),
            errors: f.reconcile_errors.with_label_values(&[controller]),
            terminal_errors: f.terminal_errors.with_label_values(&[controller]),
            time: f.reconcile_time.with_label_values(&[controller]),
            active: f.active_workers.with_label_values(&[controller]),
            max_concurrent: f.max_concurrent.with_label_values(&[controller]),
            reconnects: f.reconnects.with_label_values(&[controller]),
            controller: controller.to_string(),
        }
    }

    pub fn refused(&self, reason: &str) {
        families()
            .refusals
            .with_label_values(&[&self.controller, reason])
            .inc();
    }
}
