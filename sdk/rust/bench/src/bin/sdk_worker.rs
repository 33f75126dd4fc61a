//! informerd's Rust SDK in `make bench-sdk`: a no-op `informerd::Controller` reconciling
//! ConfigMaps, decoded as k8s-openapi's `ConfigMap` as a kube-rs user would (`--decode=typed`,
//! the default) or only scanned (`--decode=none`: `serde::de::IgnoredAny`, for a no-op that does
//! not look at the object, like the floors).
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use anyhow::Context as _;
use informerd::{Action, Client, Context, Controller};
use informerd_bench::{Args, cpu_seconds, emit_result, emit_seen};
use k8s_openapi::api::core::v1::ConfigMap;
use serde::de::{DeserializeOwned, IgnoredAny};
use tokio_util::sync::CancellationToken;

const USAGE: &str = "\
sdk-worker --target=HOST:PORT --queue=Q --namespace=NS --concurrency=F [--max-batch=B]
           (--keys=N | --seen) [--runtime=current|multi] [--decode=typed|none]

Controller::for_kind(client, Q, \"v1\", \"ConfigMap\").namespace(NS) with concurrency F (the Work
stream's credit) and max_batch B (0, the default: the credit), a no-op reconcile.
--keys=N: drains after N reconciles and prints `result {\"keys\", \"seconds\", \"keys_per_second\",
\"cpu_s\"}` timed from the first reconcile's entry to the N-th's. --seen: until SIGTERM, prints
`seen KEY` the first time a key is reconciled. --runtime: tokio's current-thread runtime (the
default) or the multi-thread one. --decode: the object decoded as k8s-openapi's ConfigMap
(typed, the default) or only scanned (none: serde's IgnoredAny).";

/// What the reconciles record.
struct Tally {
    want: u64,
    done: AtomicU64,
    first: OnceLock<Instant>,
    last: OnceLock<Instant>,
    seen: Option<Mutex<HashSet<String>>>,
    stop: CancellationToken,
}

async fn reconcile<K>(_obj: Arc<K>, ctx: Context<Tally>) -> Result<Action, Infallible> {
    let now = Instant::now();
    ctx.first.get_or_init(|| now);
    let done = ctx.done.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(seen) = &ctx.seen {
        let first = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ctx.key().to_string());
        if first {
            emit_seen([ctx.key()]);
        }
    }
    if done == ctx.want {
        ctx.last.get_or_init(|| now);
        ctx.stop.cancel();
    }
    Ok(Action::await_change())
}

fn error_policy<K>(_: Arc<K>, _: &Infallible, _: Context<Tally>) -> Action {
    Action::await_change()
}

fn main() -> anyhow::Result<()> {
    let args = Args::from_env(USAGE)?;
    let runtime = informerd_bench::runtime(&args)?;
    match args.string("decode", "typed").as_str() {
        "typed" => runtime.block_on(run::<ConfigMap>(args)),
        "none" => runtime.block_on(run::<IgnoredAny>(args)),
        other => anyhow::bail!("--decode={other}: expected typed or none"),
    }
}

async fn run<K: DeserializeOwned + Send + Sync + 'static>(args: Args) -> anyhow::Result<()> {
    let target = args.required("target")?;
    let queue = args.required("queue")?;
    let concurrency = u32::try_from(args.number("concurrency", 1)?).context("--concurrency")?;
    let max_batch = u32::try_from(args.number("max-batch", 0)?).context("--max-batch")?;
    let want = args.number("keys", 0)?;
    let seen = args.flag("seen")?;
    if (want > 0) == seen {
        anyhow::bail!("give one of --keys=N (N >= 1) and --seen");
    }
    let client =
        Client::connect_to(target.as_str()).with_context(|| format!("--target={target}"))?;
    let controller = Controller::<K>::for_kind(client, &queue, "v1", "ConfigMap")
        .namespace(args.required("namespace")?)
        .concurrency(concurrency)
        .max_batch(max_batch)
        .shutdown_on_signal();
    let tally = Arc::new(Tally {
        want,
        done: AtomicU64::new(0),
        first: OnceLock::new(),
        last: OnceLock::new(),
        seen: seen.then(|| Mutex::new(HashSet::new())),
        stop: controller.shutdown_token(),
    });
    controller
        .run(reconcile::<K>, error_policy::<K>, tally.clone())
        .await?;
    let done = tally.done.load(Ordering::Relaxed);
    let seconds = match (tally.first.get(), tally.last.get()) {
        (Some(first), Some(last)) => (*last - *first).as_secs_f64(),
        _ => 0.0,
    };
    emit_result(&serde_json::json!({
        "keys": done,
        "seconds": seconds,
        "keys_per_second": if seconds > 0.0 { want as f64 / seconds } else { 0.0 },
        "cpu_s": cpu_seconds(),
    }));
    Ok(())
}
