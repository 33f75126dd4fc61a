//! A worker process for the multi-process (and cross-language) controller tests: the Rust twin
//! of the Python SDK's `tests/workers/oracle_worker.py`, with the same flags and the same record.
//!
//! Runs a Controller on the ConfigMaps of one namespace; every reconcile appends a start line and
//! an end line (`S|E pid key token monotonic`, one `write` each on an O_APPEND file, so lines of
//! concurrent reconciles never interleave; `monotonic` is CLOCK_MONOTONIC in seconds, the clock
//! Python's `time.monotonic()` reads, so records of both languages compare) to `--out`, sleeping
//! `--sleep` seconds between (forever once `--hang-file` exists). A reconcile cancelled because
//! its Work stream broke ends with a `C` line instead (from the controller's `on_reconcile`
//! hook). SIGTERM/SIGINT drain the controller; the process then exits 0. `--ca` (a PEM file)
//! connects with TLS verified against it, `--token-file` sends the file's bearer token.
//!
//! With `--record-versions` (the chaos tests) every line has two more fields, the stream's epoch
//! and the object's resourceVersion: `S|E|C pid key token monotonic epoch rv`; before it exits
//! the process writes `X pid refusals` (the outcomes the daemon refused, from the controller's
//! `informerd_sdk_work_refusals_total`; each one is also logged with its key and token).
//!
//! ```text
//! oracle_worker --target ADDR --namespace NS --queue Q --out FILE [--sleep S]
//!               [--concurrency N] [--hang-file PATH] [--record-versions] [--ca PEM]
//!               [--token-file PATH]
//! ```

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use informerd::{Action, Context, Controller, ReconcileEventKind};
use serde_json::Value;

const USAGE: &str = "oracle_worker --target ADDR --namespace NS --queue Q --out FILE [--sleep S] \
                     [--concurrency N] [--hang-file PATH] [--record-versions] [--ca PEM] \
                     [--token-file PATH]";

/// The epoch and resourceVersion of each running reconcile, by (key, token).
type Versions = Mutex<HashMap<(String, u64), (u64, String)>>;

struct Worker {
    out: File,
    pid: u32,
    sleep: Duration,
    hang_file: Option<PathBuf>,
    /// With `--record-versions`.
    versions: Option<Versions>,
}

/// CLOCK_MONOTONIC in seconds (shared by every process on the machine, unlike `Instant`'s
/// origin).
fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

impl Worker {
    fn record(&self, kind: &str, key: &str, token: u64) {
        let mut line = format!("{kind} {} {key} {token} {:.6}", self.pid, monotonic());
        if let Some(versions) = &self.versions {
            let mut versions = versions.lock().expect("the versions lock");
            let k = (key.to_string(), token);
            let (epoch, rv) = if kind == "S" {
                versions.get(&k).cloned()
            } else {
                versions.remove(&k)
            }
            .unwrap_or((0, "-".to_string()));
            line.push_str(&format!(" {epoch} {rv}"));
        }
        line.push('\n');
        // One write: O_APPEND makes it atomic with respect to the other workers' lines.
        let written = (&self.out)
            .write(line.as_bytes())
            .expect("write the record");
        assert_eq!(written, line.len(), "a short write of the record");
    }
}

async fn reconcile(obj: Arc<Value>, ctx: Context<Worker>) -> Result<Action, informerd::Error> {
    if let Some(versions) = &ctx.versions {
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        versions
            .lock()
            .expect("the versions lock")
            .insert((ctx.key().to_string(), ctx.token()), (ctx.epoch(), rv));
    }
    ctx.record("S", ctx.key(), ctx.token());
    if ctx.hang_file.as_ref().is_some_and(|p| p.exists()) {
        futures::future::pending::<()>().await; // wedged mid-reconcile, until killed
    }
    tokio::time::sleep(ctx.sleep).await;
    ctx.record("E", ctx.key(), ctx.token());
    Ok(Action::await_change())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let names = [
        "target",
        "namespace",
        "queue",
        "out",
        "sleep",
        "concurrency",
        "hang-file",
        "ca",
        "token-file",
    ];
    // The one flag without a value.
    let (record_versions, args): (Vec<String>, Vec<String>) = std::env::args()
        .skip(1)
        .partition(|a| a == "--record-versions");
    let mut f = common::or_exit("oracle_worker", common::flags(args, &names, USAGE));
    let mut required = |name: &str| {
        f.remove(name)
            .ok_or_else(|| anyhow::anyhow!("--{name} is required\n{USAGE}"))
    };
    let (target, namespace, queue, out) = (
        required("target")?,
        required("namespace")?,
        required("queue")?,
        required("out")?,
    );
    let sleep: f64 = f.remove("sleep").as_deref().unwrap_or("0.1").parse()?;
    let concurrency: u32 = f.remove("concurrency").as_deref().unwrap_or("2").parse()?;
    common::init_logging();
    let worker = Arc::new(Worker {
        out: File::options().append(true).create(true).open(&out)?,
        pid: std::process::id(),
        sleep: Duration::from_secs_f64(sleep),
        hang_file: f.remove("hang-file").map(PathBuf::from),
        versions: (!record_versions.is_empty()).then(|| Mutex::new(HashMap::new())),
    });
    let observer = worker.clone();
    let mut options = informerd::ConnectOptions::new(target).timeout(Duration::from_secs(20));
    if let Some(ca) = f.remove("ca") {
        options = options.ca_pem(std::fs::read(&ca)?);
    }
    if let Some(token_file) = f.remove("token-file") {
        options = options.token_file(token_file);
    }
    let client = informerd::Client::connect(options)?;
    Controller::<Value>::for_kind(client, &queue, "v1", "ConfigMap")
        .namespace(namespace)
        .concurrency(concurrency)
        .shutdown_on_signal()
        .on_reconcile(move |e| {
            if e.kind == ReconcileEventKind::Cancel {
                observer.record("C", &e.key, e.token);
            }
        })
        .run(
            reconcile,
            |_, _, _| Action::requeue_rate_limited(),
            worker.clone(),
        )
        .await?;
    if worker.versions.is_some() {
        let refusals: f64 = prometheus::gather()
            .iter()
            .filter(|family| family.name() == "informerd_sdk_work_refusals_total")
            .flat_map(|family| {
                family
                    .get_metric()
                    .iter()
                    .map(|m| m.get_counter().get_value())
            })
            .sum();
        let line = format!("X {} {}\n", worker.pid, refusals as u64);
        (&worker.out).write_all(line.as_bytes())?;
    }
    Ok(())
}
