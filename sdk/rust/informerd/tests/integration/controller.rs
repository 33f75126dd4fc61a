//! The controller runtime against a real daemon: outcomes and metrics, drains, restarts, lost
//! streams, heartbeats, bad definitions.
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informerd::testing::{Signal, wait_until};
use informerd::v1::QueueState;
use informerd::{Action, Client, Context, Controller, ErrorReason, RateLimiter, WatchConfig};
use prometheus::proto::MetricType;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::{HANG, TestResult, bounded, env};

/// A ConfigMap controller named `name` on the namespace `name`.
fn configmaps(client: &Client, name: &str) -> Controller<Value> {
    Controller::<Value>::for_kind(client.clone(), name, "v1", "ConfigMap").namespace(name)
}

/// Seeds `count` ConfigMaps in `namespace`; returns their keys.
async fn seed(env: &crate::common::Env, namespace: &str, count: u32) -> BTreeSet<String> {
    env.api
        .seed("configmaps", namespace, count)
        .await
        .expect("seed");
    (0..count)
        .map(|i| format!("{namespace}/seed-{i:07}"))
        .collect()
}

pub async fn queue_state(client: &Client, queue: &str) -> QueueState {
    let info = client.queues().get(queue).await.expect("get the queue");
    info.state.unwrap_or_default()
}

pub async fn queue_idle(client: &Client, queue: &str) {
    wait_until(HANG, &format!("{queue} idle"), || async {
        let s = queue_state(client, queue).await;
        s.depth == 0 && s.in_flight == 0 && s.delayed == 0
    })
    .await
    .expect("the queue idle");
}

/// A sample of the default registry's metric `name` for `controller` (and `labels`): a
/// counter's or gauge's value, a histogram's count; 0 when absent.
pub fn sample(name: &str, controller: &str, labels: &[(&str, &str)]) -> f64 {
    for family in prometheus::gather() {
        if family.name() != name {
            continue;
        }
        for m in family.get_metric() {
            let has = |k: &str, v: &str| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == k && l.value() == v)
            };
            if has("controller", controller) && labels.iter().all(|(k, v)| has(k, v)) {
                return match family.get_field_type() {
                    MetricType::HISTOGRAM => m.get_histogram().get_sample_count() as f64,
                    MetricType::GAUGE => m.get_gauge().get_value(),
                    _ => m.get_counter().get_value(),
                };
            }
        }
    }
    0.0
}

/// One reconcile: when, the requeue count, the token.
type Call = (Instant, i64, u64);

/// What reconciles saw, shared with the test.
#[derive(Default)]
struct Seen {
    calls: Mutex<HashMap<String, Vec<Call>>>,
}

impl Seen {
    /// Records a call; returns how many this key had, this one included.
    fn record<T>(&self, ctx: &Context<T>) -> usize {
        let mut calls = self.calls.lock().unwrap();
        let v = calls.entry(ctx.key().to_string()).or_default();
        v.push((Instant::now(), ctx.requeues(), ctx.token()));
        v.len()
    }

    fn count(&self, key: &str) -> usize {
        self.calls.lock().unwrap().get(key).map_or(0, Vec::len)
    }

    fn keys(&self) -> BTreeSet<String> {
        self.calls.lock().unwrap().keys().cloned().collect()
    }

    fn of(&self, key: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
}

async fn seen_until(seen: &Seen, what: &str, ok: impl Fn(&Seen) -> bool) {
    wait_until(HANG, what, || {
        let v = ok(seen);
        async move { v }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A controller running in a task.
struct Running {
    stop: CancellationToken,
    task: JoinHandle<informerd::Result<()>>,
}

impl Running {
    /// Drains it and checks that `run` returned Ok.
    async fn stop(self) {
        self.stop.cancel();
        self.stopped().await;
    }

    /// Checks that `run` returns Ok (after a drain).
    async fn stopped(self) {
        bounded("run returns after the drain", self.task)
            .await
            .expect("run did not panic")
            .expect("run returned Ok");
    }
}

/// Runs `ctl` with `reconcile` in a task; errors are terminal (`Action::await_change()`).
fn spawn<R, Fut>(ctl: Controller<Value>, reconcile: R) -> Running
where
    R: Fn(Arc<Value>, Context<()>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = informerd::Result<Action>> + Send + 'static,
{
    Running {
        stop: ctl.shutdown_token(),
        task: tokio::spawn(ctl.run(reconcile, |_, _, _| Action::await_change(), Arc::new(()))),
    }
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("not yet")]
    NotYet,
    #[error("cannot ever work")]
    Never,
}

#[tokio::test]
async fn outcomes_map_to_retries_requeues_and_metrics() -> TestResult {
    let env = env().await;
    let name = "ctl-outcomes";
    seed(&env, name, 5).await;
    let key = |i: u32| format!("{name}/seed-{i:07}");
    let (k1, k2, k3, k4) = (key(1), key(2), key(3), key(4));
    let seen = Arc::new(Seen::default());
    let keys = Arc::new((k1.clone(), k2.clone(), k3.clone(), k4.clone()));
    let ctl = configmaps(&env.client, name)
        .concurrency(2)
        .rate_limiter(RateLimiter::exponential(10, 200)?);
    let (s, k) = (seen.clone(), keys.clone());
    let stop = ctl.shutdown_token();
    let running = Running {
        stop,
        task: tokio::spawn(ctl.run(
            move |_obj: Arc<Value>, ctx: Context<()>| {
                let (seen, keys) = (s.clone(), k.clone());
                async move {
                    let n = seen.record(&ctx);
                    assert_eq!(ctx.namespace(), "ctl-outcomes");
                    assert_eq!(Some(ctx.name()), ctx.key().split('/').nth(1));
                    let key = ctx.key();
                    if key == keys.0 && ctx.requeues() < 3 {
                        return Err(Failure::NotYet);
                    }
                    if key == keys.1 {
                        return Err(Failure::Never);
                    }
                    if key == keys.2 && n == 1 {
                        return Ok(Action::requeue(Duration::from_millis(500)));
                    }
                    if key == keys.3 && n == 1 {
                        return Ok(Action::requeue_rate_limited());
                    }
                    Ok(Action::await_change())
                }
            },
            |_, e: &Failure, _| match e {
                Failure::NotYet => Action::requeue_rate_limited(),
                Failure::Never => Action::await_change(),
            },
            Arc::new(()),
        )),
    };
    seen_until(&seen, "4 reconciles of the failing key", |s| {
        s.count(&k1) == 4
    })
    .await;
    seen_until(&seen, "the requeue after", |s| s.count(&k3) == 2).await;
    seen_until(&seen, "the rate-limited requeue", |s| s.count(&k4) == 2).await;
    let requeues = |k: &str| seen.of(k).iter().map(|c| c.1).collect::<Vec<_>>();
    assert_eq!(requeues(&k1), [0, 1, 2, 3]);
    let c3 = seen.of(&k3);
    assert!(c3[1].0 - c3[0].0 >= Duration::from_millis(450));
    assert_eq!(c3[1].1, 0, "requeue(d) forgets the failures");
    assert_eq!(requeues(&k4), [0, 1]);
    queue_idle(&env.client, name).await;
    assert_eq!(seen.count(&k2), 1, "the terminal error was not retried");
    assert_eq!(env.client.queues().num_requeues(name, &k2).await?, 0);

    let m = |metric: &str, labels: &[(&str, &str)]| sample(metric, name, labels);
    let total = "controller_runtime_reconcile_total";
    assert_eq!(m(total, &[("result", "error")]), 4.0);
    assert_eq!(m(total, &[("result", "success")]), 4.0);
    assert_eq!(m(total, &[("result", "requeue_after")]), 1.0);
    assert_eq!(m(total, &[("result", "requeue")]), 1.0);
    assert_eq!(m("controller_runtime_reconcile_errors_total", &[]), 4.0);
    assert_eq!(
        m("controller_runtime_terminal_reconcile_errors_total", &[]),
        1.0
    );
    assert_eq!(m("controller_runtime_reconcile_time_seconds", &[]), 10.0);
    assert_eq!(m("controller_runtime_max_concurrent_reconciles", &[]), 2.0);
    assert_eq!(m("controller_runtime_active_workers", &[]), 0.0);
    running.stop().await;
    Ok(())
}

/// The twin of the Python SDK's test_a_requeue_waits_at_the_priority_its_result_names: a
/// requeue waits at the priority its Action names, else at the key's own; one out of range
/// fails the reconcile (retried at the key's own priority).
#[tokio::test]
async fn a_requeue_waits_at_the_priority_its_action_names() -> TestResult {
    let env = env().await;
    let name = "ctl-priority";
    seed(&env, name, 1).await;
    let seen: Arc<Mutex<Vec<i32>>> = Arc::default();
    let ctl = configmaps(&env.client, name).rate_limiter(RateLimiter::exponential(10, 200)?);
    let s = seen.clone();
    let running = spawn(ctl, move |_obj, ctx| {
        let seen = s.clone();
        async move {
            let n = {
                let mut v = seen.lock().unwrap();
                v.push(ctx.priority());
                v.len()
            };
            Ok(match n {
                1 => Action::requeue_rate_limited().priority(5),
                2 => Action::requeue(Duration::ZERO).priority(-3),
                3 => Action::requeue_rate_limited(), // the key's own: -3
                4 => Action::requeue(Duration::ZERO).priority(2_000_000), // out of range
                _ => Action::await_change(),
            })
        }
    });
    wait_until(HANG, "5 reconciles", || {
        let n = seen.lock().unwrap().len();
        async move { n == 5 }
    })
    .await?;
    assert_eq!(*seen.lock().unwrap(), [0, 5, -3, -3, -3]);
    let errors = sample(
        "controller_runtime_reconcile_total",
        name,
        &[("result", "error")],
    );
    assert_eq!(
        errors, 1.0,
        "the out-of-range priority failed its reconcile"
    );
    running.stop().await;
    Ok(())
}

/// The twin of the Python SDK's test_source_priorities_rank_the_initial_list_below_changes: the
/// initial list waits at LOW_PRIORITY and says it is the initial list, a change does neither.
#[tokio::test]
async fn source_priorities_rank_the_initial_list_below_changes() -> TestResult {
    let env = env().await;
    let name = "ctl-initial";
    let initial = seed(&env, name, 2).await;
    // Per key: (priority, is_in_initial_list) of each reconcile.
    type ByKey = HashMap<String, Vec<(i32, bool)>>;
    let seen: Arc<Mutex<ByKey>> = Arc::default();
    let ctl =
        configmaps(&env.client, name).priorities(Some(informerd::queues::LOW_PRIORITY), None, None);
    let s = seen.clone();
    let running = spawn(ctl, move |_obj, ctx| {
        let seen = s.clone();
        async move {
            let mut v = seen.lock().unwrap();
            v.entry(ctx.key().to_string())
                .or_default()
                .push((ctx.priority(), ctx.is_in_initial_list()));
            Ok(Action::await_change())
        }
    });
    wait_until(HANG, "the initial list", || {
        let keys: BTreeSet<String> = seen.lock().unwrap().keys().cloned().collect();
        let done = keys == initial;
        async move { done }
    })
    .await?;
    for k in &initial {
        assert_eq!(seen.lock().unwrap()[k], [(-100, true)], "{k}");
    }
    env.api
        .put_configmap(name, "changed", &[("a", "b")], &[])
        .await
        .expect("put");
    let changed = format!("{name}/changed");
    wait_until(HANG, "the change, at 0", || {
        let v = seen.lock().unwrap().get(&changed).cloned();
        async move { v.as_deref() == Some(&[(0, false)][..]) }
    })
    .await?;
    running.stop().await;
    Ok(())
}

#[tokio::test]
async fn stop_drains_in_flight_reconciles_and_loses_nothing() -> TestResult {
    let env = env().await;
    let name = "ctl-stop";
    let keys = seed(&env, name, 6).await;
    let started = Arc::new(Seen::default());
    let finished = Arc::new(Seen::default());
    let (open, gate) = tokio::sync::watch::channel(false);
    let reconcile = {
        let (started, finished) = (started.clone(), finished.clone());
        move |_: Arc<Value>, ctx: Context<()>| {
            let (started, finished, mut gate) = (started.clone(), finished.clone(), gate.clone());
            async move {
                started.record(&ctx);
                let _ = gate.wait_for(|open| *open).await;
                finished.record(&ctx);
                Ok::<_, informerd::Error>(Action::await_change())
            }
        }
    };
    let policy = |_: Arc<Value>, _: &informerd::Error, _: Context<()>| Action::await_change();
    let ctl = configmaps(&env.client, name).concurrency(3);
    let running = spawn(ctl, reconcile.clone());
    seen_until(&started, "3 reconciles in flight", |s| s.keys().len() == 3).await;
    assert_eq!(sample("controller_runtime_active_workers", name, &[]), 3.0);
    running.stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !running.task.is_finished(),
        "run waits for the in-flight reconciles"
    );
    open.send_replace(true);
    running.stopped().await;
    assert_eq!(finished.keys(), started.keys());
    assert_eq!(started.keys().len(), 3, "nothing new after the drain");
    let state = queue_state(&env.client, name).await;
    assert_eq!((state.in_flight, state.depth), (0, 3), "the rest waits");

    // Another run takes the rest.
    let ctl = configmaps(&env.client, name).concurrency(3);
    let running = spawn(ctl, reconcile.clone());
    seen_until(&finished, "the rest reconciled", |s| s.keys() == keys).await;
    running.stop().await;
    // A controller stopped before it runs returns at once.
    let ctl = configmaps(&env.client, name);
    ctl.shutdown_token().cancel();
    bounded(
        "run of a stopped controller",
        ctl.run(reconcile, policy, Arc::new(())),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_daemon_restart_reconnects_reensures_and_reconciles_everything_again() -> TestResult {
    let mut env = env().await;
    let name = "ctl-restart";
    let keys = seed(&env, name, 20).await;
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let ctl = configmaps(&env.client, name).concurrency(4);
    let running = spawn(ctl, move |obj: Arc<Value>, ctx: Context<()>| {
        let seen = s.clone();
        async move {
            assert_eq!(obj["metadata"]["name"], ctx.name());
            seen.record(&ctx);
            Ok::<_, informerd::Error>(Action::await_change())
        }
    });
    seen_until(&seen, "every object reconciled", |s| s.keys() == keys).await;
    queue_idle(&env.client, name).await;
    let before: HashMap<String, usize> = keys.iter().map(|k| (k.clone(), seen.count(k))).collect();
    env.daemon.restart(Signal::Term).await?;
    seen_until(&seen, "every object reconciled again", |s| {
        keys.iter().all(|k| s.count(k) > before[k])
    })
    .await;
    assert!(sample("informerd_sdk_work_reconnects_total", name, &[]) >= 1.0);
    wait_until(HANG, "the controller back on the queue", || async {
        env.client
            .queues()
            .get(name)
            .await
            .ok()
            .and_then(|i| i.state)
            .map(|s| s.workers)
            == Some(1)
    })
    .await?;
    running.stop().await;
    Ok(())
}

/// Records the token of a reconcile dropped before it finished (a cancelled one).
struct CancelGuard {
    token: u64,
    cancelled: Arc<Mutex<Vec<u64>>>,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.cancelled.lock().unwrap().push(self.token);
        }
    }
}

#[tokio::test]
async fn a_lost_stream_cancels_in_flight_reconciles_and_redelivers() -> TestResult {
    let mut env = env().await;
    let name = "ctl-loss";
    let keys = seed(&env, name, 2).await;
    let seen = Arc::new(Seen::default());
    let cancelled = Arc::new(Mutex::new(Vec::new()));
    let (s, c) = (seen.clone(), cancelled.clone());
    let ctl = configmaps(&env.client, name).concurrency(2);
    let running = spawn(ctl, move |_: Arc<Value>, ctx: Context<()>| {
        let (seen, cancelled) = (s.clone(), c.clone());
        async move {
            if seen.record(&ctx) == 1 {
                let mut guard = CancelGuard {
                    token: ctx.token(),
                    cancelled,
                    armed: true,
                };
                tokio::time::sleep(Duration::from_secs(3600)).await;
                guard.armed = false;
            }
            Ok::<_, informerd::Error>(Action::await_change())
        }
    });
    seen_until(&seen, "both keys in flight", |s| s.keys() == keys).await;
    // The daemon dies (its state with it) and comes back: the stream breaks.
    env.daemon.restart(Signal::Kill).await?;
    seen_until(&seen, "both reconciled again", |s| {
        keys.iter().all(|k| s.count(k) == 2)
    })
    .await;
    let first: BTreeSet<u64> = keys.iter().map(|k| seen.of(k)[0].2).collect();
    let was_cancelled: BTreeSet<u64> = cancelled.lock().unwrap().iter().copied().collect();
    assert_eq!(
        was_cancelled, first,
        "the in-flight reconciles were cancelled"
    );
    for k in &keys {
        let calls = seen.of(k);
        assert!(calls[1].2 > calls[0].2, "{k}: a newer token");
    }
    queue_idle(&env.client, name).await;
    // The cancelled reconciles sent nothing: nothing was refused.
    assert_eq!(sample("informerd_sdk_work_refusals_total", name, &[]), 0.0);
    running.stop().await;
    Ok(())
}

#[tokio::test]
async fn heartbeats_keep_a_long_reconcile_past_the_lease_timeout() -> TestResult {
    let env = env().await;
    let name = "ctl-long";
    let keys = seed(&env, name, 1).await;
    let done = Arc::new(Seen::default());
    let d = done.clone();
    let ctl = configmaps(&env.client, name).lease_timeout(Duration::from_secs(1));
    let running = spawn(ctl, move |_: Arc<Value>, ctx: Context<()>| {
        let done = d.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            done.record(&ctx);
            Ok::<_, informerd::Error>(Action::await_change())
        }
    });
    seen_until(&done, "the long reconcile finished", |s| {
        !s.keys().is_empty()
    })
    .await;
    queue_idle(&env.client, name).await;
    assert_eq!(queue_state(&env.client, name).await.expired_leases, 0);
    assert_eq!(done.keys(), keys);
    assert_eq!(done.count(keys.first().unwrap()), 1, "reconciled once");
    running.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_drain_timeout_cancels_hung_reconciles_and_gives_their_keys_back() -> TestResult {
    let env = env().await;
    let name = "ctl-hung";
    let keys = seed(&env, name, 1).await;
    let started = Arc::new(Seen::default());
    let s = started.clone();
    let ctl = configmaps(&env.client, name).drain_timeout(Duration::from_millis(500));
    let running = spawn(ctl, move |_: Arc<Value>, ctx: Context<()>| {
        let started = s.clone();
        async move {
            started.record(&ctx);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, informerd::Error>(Action::await_change())
        }
    });
    seen_until(&started, "the reconcile in flight", |s| s.keys() == keys).await;
    running.stop().await;
    wait_until(HANG, "the key back in the queue", || async {
        let s = queue_state(&env.client, name).await;
        s.in_flight == 0 && s.depth == 1
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn bad_definitions_fail_run_with_clear_errors() -> TestResult {
    let env = env().await;
    let noop =
        |_: Arc<Value>, _: Context<()>| async { Ok::<_, informerd::Error>(Action::await_change()) };
    let policy = |_: Arc<Value>, _: &informerd::Error, _: Context<()>| Action::await_change();
    let run = |ctl: Controller<Value>| {
        bounded(
            "run of a bad definition",
            ctl.run(noop, policy, Arc::new(())),
        )
    };

    let e = run(Controller::for_kind(
        env.client.clone(),
        "ctl-bad",
        "v1",
        "ConfigMapp",
    ))
    .await
    .unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::ResourceNotFound), "{e}");
    let e = run(configmaps(&env.client, "ctl-bad").watches_kind(
        "v1",
        "Secret",
        "missing",
        WatchConfig::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(e.field(), Some("Controller.watches[0].index"), "{e}");
    assert!(e.to_string().contains("\"missing\""), "{e}");
    let e = run(Controller::for_kind(
        env.client.clone(),
        "Bad_Name",
        "v1",
        "ConfigMap",
    ))
    .await
    .unwrap_err();
    assert_eq!(e.field(), Some("Controller.name"), "{e}");
    let e = run(configmaps(&env.client, "ctl-bad").concurrency(0))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("Controller.concurrency"), "{e}");
    let e = run(Controller::for_kind(
        env.client.clone(),
        "ctl-bad",
        "",
        "ConfigMap",
    ))
    .await
    .unwrap_err();
    assert_eq!(e.field(), Some("Controller.api_version"), "{e}");
    Ok(())
}
