//! The controller runtime: informers feeding one queue in the daemon, and a fixed pool of
//! reconcilers on a Work stream, shaped like kube-runtime's `Controller`.
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use informerd::{Action, Client, Context, Controller, Predicate};
//! use serde_json::Value;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("{0}")]
//! struct Error(String);
//!
//! async fn reconcile(obj: Arc<Value>, ctx: Context<()>) -> Result<Action, Error> {
//!     tracing::info!(key = ctx.key(), token = ctx.token(), "reconciling {}", obj["metadata"]["name"]);
//!     Ok(Action::requeue(Duration::from_secs(300)))
//! }
//!
//! fn error_policy(_obj: Arc<Value>, _err: &Error, _ctx: Context<()>) -> Action {
//!     Action::requeue(Duration::from_secs(5))
//! }
//!
//! # async fn f() -> informerd::Result<()> {
//! let client = Client::connect_to("127.0.0.1:7470")?;
//! Controller::<Value>::for_kind(client, "cm-audit", "v1", "ConfigMap")
//!     .namespace("demo")
//!     .predicate(Predicate::generation_changed())
//!     .concurrency(8)
//!     .shutdown_on_signal()
//!     .run(reconcile, error_policy, Arc::new(()))
//!     .await
//! # }
//! ```
//!
//! Semantics, as kube-runtime's where the names are the same:
//! - each key is reconciled by one reconcile at a time, across every process on the queue;
//! - `reconcile` gets the object from the lease (the daemon's cache, no extra round trip); a key
//!   whose object is gone is acknowledged without calling it, as kube-runtime does (act on
//!   deletion with a finalizer: [`crate::kube::finalizer`] with the `kube` feature);
//! - `Ok(Action::await_change())` forgets the key's failures; `Ok(Action::requeue(d))` forgets
//!   them and looks again after `d` (controller-runtime's `RequeueAfter`); an error goes to
//!   `error_policy`, whose `Action::requeue(d)` retries after `d` keeping the failure count,
//!   `Action::requeue_rate_limited()` retries after the queue's rate limiter's delay, and
//!   `Action::await_change()` gives up until the object changes (a terminal error);
//! - when the Work stream breaks for any reason (a daemon restart, the network, keepalive noticing
//!   a frozen daemon, the replica stepping down as leader: [`Error::NotLeader`]), every in-flight
//!   reconcile is cancelled at once (its future dropped, [`Context::cancellation`] cancelled) and
//!   the outcomes of the old stream are never sent — the daemon already gave those keys back to
//!   the queue, or a new leader hands them out anew. The controller logs the cancelled keys,
//!   reconnects with jittered backoff, following a replica set's leader, ensures its informers
//!   and queue again, and opens a new stream;
//! - [`Controller::on_reconcile`] observes each reconcile's start, end or cancel, with its key,
//!   token and stream epoch;
//! - on shutdown (a signal with [`Controller::shutdown_on_signal`], or
//!   [`Controller::graceful_shutdown_on`]) it drains: the daemon stops handing out keys and takes
//!   back those not yet delivered, in-flight reconciles finish and their outcomes are sent, and
//!   `run` returns. No key is lost.
use std::collections::HashSet;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use informerd_api::v1::{self, ProcessRequest, outcome, process_request, process_response};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::{Backoff, Client, Route};
use crate::error::{Error, ErrorReason, Result};
use crate::informers::{IndexSpec, Informer, InformerSpec};
use crate::metrics::ControllerMetrics;
use crate::object::Object;
use crate::queues::{Predicate, QueueSpec, RateLimiter, Source, validate_queue_name};

const MAX_CONCURRENCY: u32 = 10_000;
const MAX_ERROR_CHARS: usize = 1024;

/// What to do with a key after its reconcile (kube-runtime's `Action`).
///
/// A requeue waits at the priority the key was handed out at ([`Context::priority`]) unless
/// [`Action::priority`] names another (controller-runtime's `Result.Priority`):
///
/// ```
/// use std::time::Duration;
/// use informerd::Action;
///
/// // Look again in five minutes, behind every key that changed meanwhile.
/// let later = Action::requeue(Duration::from_secs(300)).priority(-100);
/// assert_eq!(later.requeue_priority(), Some(-100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    kind: ActionKind,
    priority: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ActionKind {
    AwaitChange,
    Requeue(Duration),
    RateLimited,
}

impl Action {
    /// Reconcile the key again after `delay` (from `reconcile`: its failures are forgotten
    /// first, as controller-runtime's `RequeueAfter`; from `error_policy`: a retry that keeps
    /// the failure count).
    pub fn requeue(delay: Duration) -> Action {
        Action::of(ActionKind::Requeue(delay))
    }

    /// Nothing more to do until the object (or something mapped to it) changes.
    pub fn await_change() -> Action {
        Action::of(ActionKind::AwaitChange)
    }

    /// Retry after the queue's rate limiter's delay (client-go's `AddRateLimited`; counts as a
    /// failure).
    pub fn requeue_rate_limited() -> Action {
        Action::of(ActionKind::RateLimited)
    }

    /// The priority the requeue waits at, in [`MIN_PRIORITY`]`..=`[`MAX_PRIORITY`] (higher is
    /// handed out first). A priority out of that range fails the reconcile instead: the key is
    /// retried at its own priority, and the error is logged. No effect on
    /// [`Action::await_change`].
    ///
    /// [`MIN_PRIORITY`]: crate::queues::MIN_PRIORITY
    /// [`MAX_PRIORITY`]: crate::queues::MAX_PRIORITY
    pub fn priority(self, priority: i32) -> Action {
        Action {
            priority: Some(priority),
            ..self
        }
    }

    /// The priority [`Action::priority`] set, if any.
    pub fn requeue_priority(&self) -> Option<i32> {
        self.priority
    }

    fn of(kind: ActionKind) -> Action {
        Action {
            kind,
            priority: None,
        }
    }
}

/// The context of one reconcile: the lease (key, fencing token, requeue count) and the user's
/// data, which it dereferences to (as kube-runtime's `Arc<Ctx>`).
pub struct Context<T> {
    data: Arc<T>,
    lease: Arc<LeaseInfo>,
}

struct LeaseInfo {
    key: String,
    token: u64,
    requeues: i64,
    priority: i32,
    is_in_initial_list: bool,
    cluster: String,
    controller: Arc<str>,
    client: Client,
    stream: Arc<StreamInfo>,
}

impl<T> Clone for Context<T> {
    fn clone(&self) -> Self {
        Context {
            data: self.data.clone(),
            lease: self.lease.clone(),
        }
    }
}

impl<T> Deref for Context<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T> std::fmt::Debug for Context<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("controller", &self.lease.controller)
            .field("key", &self.lease.key)
            .field("token", &self.lease.token)
            .field("requeues", &self.lease.requeues)
            .field("epoch", &self.lease.stream.epoch)
            .finish()
    }
}

impl<T> Context<T> {
    /// The user's data given to [`Controller::run`].
    pub fn data(&self) -> &Arc<T> {
        &self.data
    }

    /// The key being reconciled (`namespace/name` or `name`).
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The lease's fencing token: strictly increasing per queue. Writes that must not race an
    /// earlier holder of the key can carry it.
    pub fn token(&self) -> u64 {
        self.lease.token
    }

    /// How often this key failed in a row so far (client-go's `NumRequeues`).
    pub fn requeues(&self) -> i64 {
        self.lease.requeues
    }

    /// The priority the key waited at (0 unless its adds or its queue's sources named one).
    pub fn priority(&self) -> i32 {
        self.lease.priority
    }

    /// Every add the key waited for came from an informer's initial list (client-go's
    /// `OnAdd(obj, isInInitialList)`): startup work, not a change.
    pub fn is_in_initial_list(&self) -> bool {
        self.lease.is_in_initial_list
    }

    /// The cluster of the queue's informers.
    pub fn cluster(&self) -> &str {
        &self.lease.cluster
    }

    /// The key's namespace ("" for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        crate::object::split_key(&self.lease.key).0
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        crate::object::split_key(&self.lease.key).1
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.lease.controller
    }

    /// The informerd client the controller runs on (e.g. for reads from other informers).
    pub fn client(&self) -> &Client {
        &self.lease.client
    }

    /// The epoch of the Work stream the lease came on (`Started.epoch`): a replica set's
    /// leader's term epoch or a single daemon's start time, both at least the wall clock in
    /// Unix ns. Every token of the stream is greater.
    pub fn epoch(&self) -> u64 {
        self.lease.stream.epoch
    }

    /// The daemon's id of that Work stream (`Started.stream_id`).
    pub fn stream_id(&self) -> &str {
        &self.lease.stream.id
    }

    /// Cancelled when the reconcile is: its Work stream broke (the daemon restarted, the
    /// connection or keepalive failed, the replica stopped leading) or a drain timed out. The
    /// reconcile's future is dropped at that moment too; this token is for work it spawned,
    /// which dropping does not stop.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use informerd::{Action, Context};
    /// async fn reconcile(_: Arc<serde_json::Value>, ctx: Context<()>) -> informerd::Result<Action> {
    ///     let cancelled = ctx.cancellation().clone();
    ///     let work = tokio::spawn(async move {
    ///         tokio::select! {
    ///             _ = cancelled.cancelled() => Err("cancelled"),
    ///             _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => Ok(()),
    ///         }
    ///     });
    ///     let _ = work.await;
    ///     Ok(Action::await_change())
    /// }
    /// ```
    pub fn cancellation(&self) -> &CancellationToken {
        &self.lease.stream.cancel
    }
}

/// What happened to a reconcile, for [`Controller::on_reconcile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReconcileEventKind {
    /// The reconcile is about to run.
    Start,
    /// It returned; `result` is its `controller_runtime_reconcile_total` label (`success`,
    /// `requeue`, `requeue_after`, `error`). Its outcome is sent next.
    End {
        /// The result label.
        result: &'static str,
    },
    /// It was cancelled: its Work stream ended (broke, or a drain timed out). Its outcome is
    /// never sent.
    Cancel,
}

/// One step of one reconcile: what a test's oracle needs to check that no key is in two
/// reconciles at once, across processes and leaders.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReconcileEvent {
    /// What happened.
    pub kind: ReconcileEventKind,
    /// The key.
    pub key: String,
    /// The lease's fencing token.
    pub token: u64,
    /// The epoch of the Work stream the lease came on ([`Context::epoch`]).
    pub epoch: u64,
    /// That stream's id ([`Context::stream_id`]).
    pub stream_id: Arc<str>,
    /// When it happened.
    pub at: Instant,
}

type Observer = Arc<dyn Fn(&ReconcileEvent) + Send + Sync>;

/// How a secondary resource maps to the controller's keys, and what of it to watch.
#[derive(Clone, Debug, Default)]
pub struct WatchConfig {
    namespace: Option<String>,
    label_selector: String,
    predicates: Vec<Predicate>,
    all_owners: bool,
    by_name: bool,
    initial_list_priority: Option<i32>,
    unchanged_priority: Option<i32>,
    changed_priority: Option<i32>,
}

impl WatchConfig {
    /// The priority of adds from the informer's initial list
    /// ([`Source::initial_list_priority`]).
    pub fn initial_list_priority(mut self, priority: i32) -> Self {
        self.initial_list_priority = Some(priority);
        self
    }

    /// The priority of adds of unchanged objects ([`Source::unchanged_priority`]).
    pub fn unchanged_priority(mut self, priority: i32) -> Self {
        self.unchanged_priority = Some(priority);
        self
    }

    /// The priority of every other add ([`Source::changed_priority`]).
    pub fn changed_priority(mut self, priority: i32) -> Self {
        self.changed_priority = Some(priority);
        self
    }

    /// Watch this namespace (default: the controller's).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects matching this label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = selector.into();
        self
    }

    /// Only update events that pass this predicate (all must pass).
    pub fn predicate(mut self, p: Predicate) -> Self {
        self.predicates.push(p);
        self
    }

    /// For [`Controller::owns`]: every owner of the controller's kind, not only the
    /// controller owner.
    pub fn all_owners(mut self) -> Self {
        self.all_owners = true;
        self
    }

    /// For [`Controller::watches`]: look the index up by the object's name instead of its key.
    pub fn by_name(mut self) -> Self {
        self.by_name = true;
        self
    }
}

#[derive(Clone, Debug)]
enum Role {
    For,
    Owns,
    Watches(String),
}

#[derive(Clone, Debug)]
struct WatchDef {
    role: Role,
    api_version: String,
    kind: String,
    config: WatchConfig,
}

/// A controller for resources of type `K` (see the module docs).
pub struct Controller<K> {
    client: Client,
    name: String,
    queue: String,
    main: WatchDef,
    main_indexes: Vec<IndexSpec>,
    cluster: String,
    others: Vec<WatchDef>,
    concurrency: u32,
    max_batch: u32,
    resync: Duration,
    lease_timeout: Duration,
    priority_aging: Duration,
    rate_limiter: Option<RateLimiter>,
    sync_timeout: Duration,
    drain_timeout: Option<Duration>,
    // In a Mutex so that the Controller is Sync (`run` holds `&self` across awaits, and its
    // future must be Send to be spawned); the trigger futures themselves need only be Send.
    triggers: Mutex<Vec<BoxFuture<'static, ()>>>,
    stop: CancellationToken,
    backoff: Backoff,
    observer: Option<Observer>,
    invalid: Option<Error>,
    _k: PhantomData<fn() -> K>,
}

impl<K: crate::Resource> Controller<K> {
    /// A controller named `name` (also its queue's name) for the resource type `K`, in all
    /// namespaces. With the `kube` feature, k8s-openapi and `#[derive(CustomResource)]` types are
    /// [`crate::Resource`]s.
    pub fn new(client: Client, name: &str) -> Self {
        Controller::for_kind(client, name, &K::api_version(), &K::kind())
    }

    /// Reconcile the owner of `C` objects whose controller owner is a `K` (controller-runtime's
    /// `Owns`, kube-runtime's `owns`).
    pub fn owns<C: crate::Resource>(self, config: WatchConfig) -> Self {
        self.owns_kind(&C::api_version(), &C::kind(), config)
    }

    /// Reconcile the `K` objects whose index `index` (see [`Controller::index`]) holds a `W`
    /// object's key (or its name with [`WatchConfig::by_name`]) when that object changes
    /// (kube-runtime's `watches` with a mapper, done by the daemon).
    pub fn watches<W: crate::Resource>(self, index: &str, config: WatchConfig) -> Self {
        self.watches_kind(&W::api_version(), &W::kind(), index, config)
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl<K> Controller<K>
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    /// A controller named `name` (also its queue's name) for `kind` in `api_version`, decoded as
    /// `K` (any serde type, e.g. `serde_json::Value`), in all namespaces.
    pub fn for_kind(client: Client, name: &str, api_version: &str, kind: &str) -> Self {
        let mut c = Controller {
            client,
            name: name.to_string(),
            queue: name.to_string(),
            main: WatchDef {
                role: Role::For,
                api_version: api_version.into(),
                kind: kind.into(),
                config: WatchConfig::default(),
            },
            main_indexes: Vec::new(),
            cluster: String::new(),
            others: Vec::new(),
            concurrency: 1,
            max_batch: 0,
            resync: Duration::ZERO,
            lease_timeout: Duration::ZERO,
            priority_aging: Duration::ZERO,
            rate_limiter: None,
            sync_timeout: Duration::from_secs(120),
            drain_timeout: None,
            triggers: Mutex::new(Vec::new()),
            stop: CancellationToken::new(),
            backoff: Backoff::default(),
            observer: None,
            invalid: None,
            _k: PhantomData,
        };
        c.check(validate_queue_name(name, "Controller.name"));
        if api_version.is_empty() {
            c.check(Err(Error::invalid(
                "Controller.api_version",
                "empty (e.g. \"v1\" or \"apps/v1\")",
            )));
        }
        if kind.is_empty() {
            c.check(Err(Error::invalid(
                "Controller.kind",
                "empty (e.g. \"ConfigMap\")",
            )));
        }
        c
    }

    fn check(&mut self, r: Result<()>) {
        if let (Err(e), None) = (r, &self.invalid) {
            self.invalid = Some(e);
        }
    }

    /// Only this namespace (default: all).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.main.config.namespace = Some(namespace.into());
        self
    }

    /// Only objects matching this label selector (filtered in the daemon).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.main.config.label_selector = selector.into();
        self
    }

    /// Only update events that pass this predicate (kube-runtime's `predicate_filter`; done by
    /// the daemon). All given must pass.
    pub fn predicate(mut self, predicate: Predicate) -> Self {
        self.main.config.predicates.push(predicate);
        self
    }

    /// An index on the controller's informer, for [`Controller::watches`] and reads.
    pub fn index(mut self, index: IndexSpec) -> Self {
        self.main_indexes.push(index);
        self
    }

    /// Another cluster of the daemon's config (default: its default cluster).
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// Name the queue differently from the controller (several controllers may share a queue).
    pub fn queue(mut self, queue: &str) -> Self {
        self.check(validate_queue_name(queue, "Controller.queue"));
        self.queue = queue.to_string();
        self
    }

    /// [`Controller::owns`] by apiVersion and kind.
    pub fn owns_kind(mut self, api_version: &str, kind: &str, config: WatchConfig) -> Self {
        self.others.push(WatchDef {
            role: Role::Owns,
            api_version: api_version.into(),
            kind: kind.into(),
            config,
        });
        self
    }

    /// [`Controller::watches`] by apiVersion and kind.
    pub fn watches_kind(
        mut self,
        api_version: &str,
        kind: &str,
        index: &str,
        config: WatchConfig,
    ) -> Self {
        if index.is_empty() {
            self.check(Err(Error::invalid("Controller.watches.index", "empty")));
        }
        self.others.push(WatchDef {
            role: Role::Watches(index.into()),
            api_version: api_version.into(),
            kind: kind.into(),
            config,
        });
        self
    }

    /// How many reconciles run at once in this process (the Work stream's credit), 1 .. 10000.
    pub fn concurrency(mut self, n: u32) -> Self {
        if !(1..=MAX_CONCURRENCY).contains(&n) {
            self.check(Err(Error::invalid(
                "Controller.concurrency",
                format!("{n}, want 1 .. {MAX_CONCURRENCY}"),
            )));
        }
        self.concurrency = n;
        self
    }

    /// At most this many keys per delivery (0: up to the credit).
    pub fn max_batch(mut self, n: u32) -> Self {
        self.max_batch = n;
        self
    }

    /// Reconcile every object again this often (zero: never; else at least 1 s).
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }

    /// Hand a key to another worker when its reconcile is neither answered nor heartbeated
    /// within this long (this SDK heartbeats every third of it while a reconcile runs).
    pub fn lease_timeout(mut self, timeout: Duration) -> Self {
        self.lease_timeout = timeout;
        self
    }

    /// How long a key waits at most before it goes ahead of higher priorities (zero, the
    /// default: the daemon's, one minute).
    pub fn priority_aging(mut self, aging: Duration) -> Self {
        self.priority_aging = aging;
        self
    }

    /// The priorities of the reconciled kind's adds: from the informer's initial list
    /// (controller-runtime: [`LOW_PRIORITY`](crate::queues::LOW_PRIORITY)), of unchanged
    /// objects, of changes (`None`: as [`WatchConfig`]'s methods of the same names). Secondary
    /// kinds take theirs in their [`WatchConfig`].
    pub fn priorities(
        mut self,
        initial_list: Option<i32>,
        unchanged: Option<i32>,
        changed: Option<i32>,
    ) -> Self {
        self.main.config.initial_list_priority = initial_list;
        self.main.config.unchanged_priority = unchanged;
        self.main.config.changed_priority = changed;
        self
    }

    /// How retried keys wait (default: client-go's default controller rate limiter).
    pub fn rate_limiter(mut self, limiter: RateLimiter) -> Self {
        self.rate_limiter = Some(limiter);
        self
    }

    /// How long to wait for the informers' first lists (default 120 s).
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// On shutdown, cancel reconciles still running after this long (their keys go back to
    /// the queue). Default: wait for them.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// How to space reconnect attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Calls `observer` with every step of every reconcile: [`ReconcileEventKind::Start`]
    /// before it runs, then `End` (it returned; before its outcome is sent) or `Cancel` (its
    /// Work stream ended). It runs on the controller's task: it must not block.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use informerd::{Action, Client, Context, Controller, ReconcileEventKind};
    /// # async fn f(client: Client) -> informerd::Result<()> {
    /// Controller::<serde_json::Value>::for_kind(client, "audit", "v1", "ConfigMap")
    ///     .on_reconcile(|e| {
    ///         if e.kind == ReconcileEventKind::Cancel {
    ///             eprintln!("{} (token {}) cancelled", e.key, e.token);
    ///         }
    ///     })
    ///     .run(
    ///         |_, _: Context<()>| async { Ok::<_, informerd::Error>(Action::await_change()) },
    ///         |_, _, _| Action::requeue_rate_limited(),
    ///         Arc::new(()),
    ///     )
    ///     .await
    /// # }
    /// ```
    pub fn on_reconcile(
        mut self,
        observer: impl Fn(&ReconcileEvent) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Drain and return from `run` on SIGTERM or SIGINT (kube-runtime's
    /// `shutdown_on_signal`).
    pub fn shutdown_on_signal(mut self) -> Self {
        self.triggers
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .push(
                async {
                    use tokio::signal::unix::{SignalKind, signal};
                    let (Ok(mut term), Ok(mut int)) = (
                        signal(SignalKind::terminate()),
                        signal(SignalKind::interrupt()),
                    ) else {
                        tracing::error!("cannot install the SIGTERM/SIGINT handlers");
                        return futures::future::pending().await;
                    };
                    tokio::select! {
                        _ = term.recv() => tracing::info!("SIGTERM: draining"),
                        _ = int.recv() => tracing::info!("SIGINT: draining"),
                    }
                }
                .boxed(),
            );
        self
    }

    /// Drain and return from `run` once `trigger` completes.
    pub fn graceful_shutdown_on(
        mut self,
        trigger: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.triggers
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .push(trigger.boxed());
        self
    }

    /// A token that drains the controller when cancelled (from anywhere).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    fn queue_spec(&self, sources: Vec<Source>) -> Result<QueueSpec> {
        let mut spec = QueueSpec::new(self.queue.clone())?;
        for s in sources {
            spec = spec.source(s);
        }
        if let Some(l) = &self.rate_limiter {
            spec = spec.rate_limiter(l.clone());
        }
        let spec = spec
            .resync_period(self.resync)
            .lease_timeout(self.lease_timeout)
            .priority_aging(self.priority_aging);
        spec.canonical()?;
        Ok(spec)
    }

    fn informer_spec(&self, def: &WatchDef) -> InformerSpec {
        let namespace = def
            .config
            .namespace
            .clone()
            .or_else(|| self.main.config.namespace.clone())
            .unwrap_or_default();
        let mut spec = InformerSpec::new(def.api_version.clone(), def.kind.clone())
            .namespace(namespace)
            .cluster(self.cluster.clone());
        if matches!(def.role, Role::For) {
            for i in &self.main_indexes {
                spec = spec.index(i.clone());
            }
        }
        spec
    }

    /// Ensures the informers and the queue; returns the main informer.
    async fn ensure(&self) -> Result<Informer> {
        let informers = self.client.informers();
        let main = informers.ensure(self.informer_spec(&self.main)).await?;
        let mut sources = vec![self.source(&self.main, &main, &main)];
        let mut all = vec![main.clone()];
        for def in &self.others {
            let informer = informers.ensure(self.informer_spec(def)).await?;
            sources.push(self.source(def, &informer, &main));
            all.push(informer);
        }
        for informer in &all {
            informer.wait_for_sync(self.sync_timeout).await?;
        }
        self.client
            .queues()
            .update(self.queue_spec(sources)?, true)
            .await?;
        Ok(main)
    }

    fn source(&self, def: &WatchDef, informer: &Informer, main: &Informer) -> Source {
        let mut source = match &def.role {
            Role::For => Source::object(informer),
            Role::Owns => {
                let s = Source::owner(
                    informer,
                    self.main.kind.clone(),
                    Some(group_of(&self.main.api_version)),
                );
                if def.config.all_owners {
                    s.all_owners()
                } else {
                    s
                }
            }
            Role::Watches(index) => {
                Source::index(informer, main, index.clone(), def.config.by_name)
            }
        };
        source = source.label_selector(def.config.label_selector.clone());
        for p in &def.config.predicates {
            source = source.predicate(p.clone());
        }
        if let Some(p) = def.config.initial_list_priority {
            source = source.initial_list_priority(p);
        }
        if let Some(p) = def.config.unchanged_priority {
            source = source.unchanged_priority(p);
        }
        if let Some(p) = def.config.changed_priority {
            source = source.changed_priority(p);
        }
        source
    }

    /// Runs the controller until it is shut down, then drains (see the module docs). Returns
    /// an error at once for a definition the daemon refuses (an unknown kind, a bad index, no
    /// permission) and keeps retrying while the daemon is unreachable.
    pub async fn run<T, E, R, RFut, P>(
        mut self,
        reconcile: R,
        error_policy: P,
        context: Arc<T>,
    ) -> Result<()>
    where
        T: Send + Sync + 'static,
        E: std::fmt::Display + Send + 'static,
        R: Fn(Arc<K>, Context<T>) -> RFut + Send + Sync + 'static,
        RFut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Context<T>) -> Action + Send + Sync + 'static,
    {
        if let Some(e) = self.invalid.take() {
            return Err(e);
        }
        for (i, def) in self.others.iter().enumerate() {
            if let Role::Watches(index) = &def.role
                && !self.main_indexes.iter().any(|s| s.name() == index)
            {
                return Err(Error::invalid(
                    format!("Controller.watches[{i}].index"),
                    format!(
                        "{index:?} is not an index of the controller's informer (add it with .index())"
                    ),
                ));
            }
        }
        self.queue_spec(Vec::new())?;
        let triggers = std::mem::take(self.triggers.get_mut().unwrap_or_else(|p| p.into_inner()));
        for trigger in triggers {
            let stop = self.stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = trigger => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            });
        }
        let _stop_on_return = self.stop.clone().drop_guard();
        let metrics = ControllerMetrics::new(&self.name);
        metrics.max_concurrent.set(self.concurrency.into());
        let run = Arc::new(Run {
            fns: Fns {
                reconcile,
                error_policy,
            },
            context,
            controller: Arc::from(self.name.as_str()),
            client: self.client.clone(),
            metrics,
            observer: self.observer.clone(),
            _k: PhantomData,
        });
        let main = loop {
            let result = tokio::select! {
                r = self.ensure() => r,
                _ = self.stop.cancelled() => return Ok(()),
            };
            match result {
                Ok(main) => break main,
                Err(e) if e.is_transient() => {
                    let delay = self.backoff.next_delay();
                    tracing::warn!(controller = %self.name, error = %e, "informerd unavailable; retrying in {delay:?}");
                    if self.sleep_unless_stopped(delay).await {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let mut lost = false;
        loop {
            if self.stop.is_cancelled() {
                return Ok(());
            }
            let result = if lost {
                tokio::select! {
                    r = self.reensure() => r,
                    _ = self.stop.cancelled() => return Ok(()),
                }
            } else {
                Ok(())
            };
            let result = match result {
                Ok(()) => self.session(&run, &main).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) if self.stop.is_cancelled() => {
                    tracing::warn!(controller = %self.name, error = %e, "work stream ended while draining");
                    return Ok(());
                }
                Err(e) if !e.is_transient() && !lost_state(&e) => return Err(e),
                Err(e) => {
                    lost = true;
                    run.metrics.reconnects.inc();
                    let delay = self.backoff.next_delay();
                    tracing::warn!(controller = %self.name, queue = %self.queue, error = %e, "work stream lost; reconnecting in {delay:?}");
                    if self.sleep_unless_stopped(delay).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn sleep_unless_stopped(&self, delay: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(delay) => false,
            _ = self.stop.cancelled() => true,
        }
    }

    async fn reensure(&self) -> Result<()> {
        self.client.reensure().await?;
        self.ensure().await.map(|_| ())
    }

    fn worker_name(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}@{}/{}", self.name, host.trim(), std::process::id())
    }

    /// Opens a Work stream on the replica set's leader (following NOT_LEADER answers within the
    /// client's deadline) and waits for `Started`. Each attempt has its own request channel: a
    /// refused attempt's call never takes this stream's outcomes.
    async fn open(&self, main: &Informer) -> Result<Opened> {
        let start = v1::Start {
            queue: self.queue.clone(),
            max_in_flight: self.concurrency,
            max_batch: self.max_batch,
            worker_name: self.worker_name(),
            object_informer_id: main.id().to_string(),
            max_batch_bytes: 0,
        };
        let timeout = self.client.options().default_timeout();
        let queue = self.queue.as_str();
        let start = &start;
        self.client
            .on_leader(
                "Work.Process",
                Some(timeout),
                |route, remaining| async move {
                    let (req_tx, req_rx) = mpsc::unbounded_channel::<ProcessRequest>();
                    req_tx
                        .send(ProcessRequest {
                            kind: Some(process_request::Kind::Start(start.clone())),
                        })
                        .map_err(|_| Error::Protocol("request channel closed".into()))?;
                    let mut rpc = route.work_raw();
                    let (inbound, first) = tokio::time::timeout(remaining, async {
                        let mut inbound = rpc
                            .process(tokio_stream::wrappers::UnboundedReceiverStream::new(req_rx))
                            .await?
                            .into_inner();
                        let first = inbound.message().await?;
                        Ok::<_, Error>((inbound, first))
                    })
                    .await
                    .map_err(|_| Error::Timeout {
                        what: format!("Work stream on {queue}: Started"),
                        seconds: remaining.as_secs_f64(),
                    })??;
                    let started = match first.and_then(|r| r.kind) {
                        Some(process_response::Kind::Started(s)) => s,
                        Some(other) => {
                            return Err(Error::Protocol(format!(
                                "the Work stream's first response is {other:?}, not Started"
                            )));
                        }
                        None => {
                            return Err(Error::Protocol(
                                "the Work stream ended before Started".into(),
                            ));
                        }
                    };
                    Ok(Opened {
                        route,
                        req_tx,
                        inbound,
                        started,
                    })
                },
            )
            .await
    }

    /// One Work stream: Ok when it ended by a drain, Err when it broke. However it ends, the
    /// reconciles still running are cancelled at once (their futures dropped, their
    /// [`Context::cancellation`] cancelled) and their outcomes are never sent: the daemon has
    /// given their keys back to the queue, or a new leader hands them out anew.
    async fn session<T, F>(&mut self, run: &Arc<Run<K, T, F>>, main: &Informer) -> Result<()>
    where
        T: Send + Sync + 'static,
        F: Reconciler<K, T>,
    {
        let Opened {
            route,
            req_tx,
            mut inbound,
            started,
        } = self.open(main).await?;
        self.backoff.reset();
        tracing::info!(controller = %self.name, queue = %self.queue, epoch = started.epoch, stream_id = %started.stream_id, leader = route.address().unwrap_or("(the configured target)"), credit = self.concurrency, "work stream started");
        let stream = Arc::new(StreamInfo {
            epoch: started.epoch,
            id: Arc::from(started.stream_id.as_str()),
            cancel: CancellationToken::new(),
        });

        let heartbeat = (started.lease_timeout_ms > 0)
            .then(|| Duration::from_millis(started.lease_timeout_ms as u64) / 3);
        let mut ticker = heartbeat.map(|d| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        // The leases handed out and not answered: heartbeated, and named when the stream breaks.
        let mut held = Held::new();
        // The pool: at most `concurrency` reconciles (the stream's credit), polled here. Nothing
        // crosses a task or a thread between a lease's arrival and its outcome.
        let mut running = FuturesUnordered::new();
        let mut outcomes = Vec::new();
        let mut drain_sent = false;
        let mut drain_deadline: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(futures::future::pending());
        let send = |kind: process_request::Kind| {
            req_tx
                .send(ProcessRequest { kind: Some(kind) })
                .map_err(|e| Error::Protocol(format!("Work stream request channel: {e}")))
        };
        let result: Result<()> = loop {
            tokio::select! {
                biased;
                Some(o) = running.next(), if !running.is_empty() => {
                    outcomes.push(o);
                    // Everything finished by now goes in one message.
                    while let Some(Some(o)) = running.next().now_or_never() {
                        outcomes.push(o);
                    }
                    flush(&mut outcomes, &mut held, &req_tx, &self.name);
                }
                msg = inbound.message() => match msg {
                    Ok(Some(resp)) => match resp.kind {
                        Some(process_response::Kind::Leases(leases)) => {
                            held.handed_out(&leases.leases);
                            for lease in leases.leases {
                                // Polled once here: a reconcile that finishes without waiting
                                // (a no-op, a cache hit) never enters the pool's bookkeeping.
                                let mut reconcile = Box::pin(reconcile_one(run, &stream, lease));
                                match (&mut reconcile).now_or_never() {
                                    Some(o) => outcomes.push(o),
                                    None => running.push(reconcile),
                                }
                            }
                            if !outcomes.is_empty() {
                                while let Some(Some(o)) = running.next().now_or_never() {
                                    outcomes.push(o);
                                }
                                flush(&mut outcomes, &mut held, &req_tx, &self.name);
                            }
                        }
                        Some(process_response::Kind::Refusals(r)) => {
                            for refusal in r.refusals {
                                held.refused(&refusal, &run.metrics, &self.queue);
                            }
                        }
                        Some(process_response::Kind::Started(_)) | None => {}
                    },
                    Ok(None) if drain_sent => {
                        tracing::info!(controller = %self.name, queue = %self.queue, "work stream drained");
                        break Ok(());
                    }
                    Ok(None) => break Err(Error::Api(Box::new(crate::error::Status {
                        code: tonic::Code::Unavailable,
                        message: format!("the daemon ended the Work stream on {} without a drain", self.queue),
                        reason: String::new(),
                        metadata: Default::default(),
                        field: None,
                    }))),
                    Err(status) => break Err(Error::from(status)),
                },
                _ = self.stop.cancelled(), if !drain_sent => {
                    drain_sent = true;
                    if let Err(e) = send(process_request::Kind::Drain(v1::Drain {})) {
                        break Err(e);
                    }
                    if let Some(t) = self.drain_timeout {
                        drain_deadline = Box::pin(tokio::time::sleep(t));
                    }
                }
                _ = &mut drain_deadline => {
                    tracing::warn!(controller = %self.name, "drain took over {:?}: cancelling reconciles", self.drain_timeout.unwrap_or_default());
                    break Ok(());
                }
                _ = async { ticker.as_mut().expect("only polled with a ticker").tick().await }, if ticker.is_some() => {
                    let leases = held.live();
                    if !leases.is_empty() && let Err(e) = send(process_request::Kind::Heartbeat(v1::Heartbeat { leases })) {
                        break Err(e);
                    }
                }
            }
        };
        // Every reconcile still running stops now, all at once: the token first (for work they
        // spawned), then their futures. Their outcomes go nowhere: `req_tx` is this stream's.
        stream.cancel.cancel();
        if !running.is_empty() {
            let ended = match &result {
                Ok(()) => "ended".to_string(),
                Err(e) => e.to_string(),
            };
            tracing::warn!(
                controller = %self.name,
                queue = %self.queue,
                epoch = stream.epoch,
                stream_id = %stream.id,
                "work stream {ended}: cancelled {} in-flight reconciles: {}",
                running.len(),
                held.describe(),
            );
        }
        drop(running);
        if let Err(e) = &result {
            // Where the leader is now (a NOT_LEADER names it; a broken connection to it sends
            // the next attempt back to the configured target).
            self.client.observe(e, &route);
        }
        result
    }
}

/// A Work stream just opened on `route`.
struct Opened {
    route: Route,
    req_tx: mpsc::UnboundedSender<ProcessRequest>,
    inbound: tonic::Streaming<v1::ProcessResponse>,
    started: v1::Started,
}

/// The Work stream reconciles came on.
struct StreamInfo {
    epoch: u64,
    id: Arc<str>,
    /// Cancelled when the stream ends: every reconcile of the stream is then cancelled.
    cancel: CancellationToken,
}

/// Errors after which the daemon's state is gone (a restart lost the queue or informer):
/// re-ensuring mends them.
fn lost_state(e: &Error) -> bool {
    matches!(
        e.reason(),
        Some(
            ErrorReason::QueueNotFound
                | ErrorReason::InformerNotFound
                | ErrorReason::QueueShutDown
                | ErrorReason::InformerDeleted
        )
    )
}

/// The user's reconcile and error policy, as one type (so the runtime's functions have one
/// bound instead of five).
trait Reconciler<K, T>: Send + Sync + 'static {
    type Error: std::fmt::Display + Send + 'static;
    type Future: Future<Output = std::result::Result<Action, Self::Error>> + Send + 'static;
    fn reconcile(&self, obj: Arc<K>, ctx: Context<T>) -> Self::Future;
    fn error_policy(&self, obj: Arc<K>, error: &Self::Error, ctx: Context<T>) -> Action;
}

struct Fns<R, P> {
    reconcile: R,
    error_policy: P,
}

impl<K, T, E, R, RFut, P> Reconciler<K, T> for Fns<R, P>
where
    K: 'static,
    T: 'static,
    E: std::fmt::Display + Send + 'static,
    R: Fn(Arc<K>, Context<T>) -> RFut + Send + Sync + 'static,
    RFut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
    P: Fn(Arc<K>, &E, Context<T>) -> Action + Send + Sync + 'static,
{
    type Error = E;
    type Future = RFut;

    fn reconcile(&self, obj: Arc<K>, ctx: Context<T>) -> RFut {
        (self.reconcile)(obj, ctx)
    }

    fn error_policy(&self, obj: Arc<K>, error: &E, ctx: Context<T>) -> Action {
        (self.error_policy)(obj, error, ctx)
    }
}

struct Run<K, T, F> {
    fns: F,
    context: Arc<T>,
    controller: Arc<str>,
    client: Client,
    metrics: ControllerMetrics,
    observer: Option<Observer>,
    _k: PhantomData<fn() -> K>,
}

impl<K, T, F> Run<K, T, F> {
    fn observe(&self, kind: ReconcileEventKind, lease: &LeaseInfo) {
        if let Some(observer) = &self.observer {
            observer(&ReconcileEvent {
                kind,
                key: lease.key.clone(),
                token: lease.token,
                epoch: lease.stream.epoch,
                stream_id: lease.stream.id.clone(),
                at: Instant::now(),
            });
        }
    }
}

/// A reconcile running: when dropped before [`InFlight::finish`] (its Work stream ended and the
/// pool with it), it counts and says that it was cancelled.
struct InFlight<'a, K, T, F> {
    run: &'a Run<K, T, F>,
    lease: Arc<LeaseInfo>,
    finished: bool,
}

impl<'a, K, T, F> InFlight<'a, K, T, F> {
    fn start(run: &'a Run<K, T, F>, lease: Arc<LeaseInfo>) -> Self {
        run.metrics.active.inc();
        run.observe(ReconcileEventKind::Start, &lease);
        InFlight {
            run,
            lease,
            finished: false,
        }
    }

    fn finish(mut self, result: &'static str) {
        self.finished = true;
        self.run.metrics.active.dec();
        self.run
            .observe(ReconcileEventKind::End { result }, &self.lease);
    }
}

impl<K, T, F> Drop for InFlight<'_, K, T, F> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.run.metrics.active.dec();
        tracing::info!(controller = %self.run.controller, key = %self.lease.key, token = self.lease.token, epoch = self.lease.stream.epoch, "reconcile cancelled: its work stream ended");
        self.run.observe(ReconcileEventKind::Cancel, &self.lease);
    }
}

/// The leases handed out and not yet answered: heartbeated while the queue's leases expire, and
/// named when the stream breaks.
struct Held {
    live: HashSet<(String, u64)>,
    expired: HashSet<(String, u64)>,
}

impl Held {
    fn new() -> Self {
        Held {
            live: HashSet::new(),
            expired: HashSet::new(),
        }
    }

    fn handed_out(&mut self, leases: &[v1::Lease]) {
        self.live
            .extend(leases.iter().map(|l| (l.key.clone(), l.token)));
    }

    fn answered(&mut self, outcomes: &[v1::Outcome]) {
        for o in outcomes {
            let k = (o.key.clone(), o.token);
            self.live.remove(&k);
            self.expired.remove(&k);
        }
    }

    /// The leases held, as `key@token`, sorted (for the log of a broken stream).
    fn describe(&self) -> String {
        let mut held: Vec<String> = self
            .live
            .iter()
            .map(|(key, token)| format!("{key}@{token}"))
            .collect();
        held.sort();
        held.join(" ")
    }

    /// The leases to heartbeat: held and not refused.
    fn live(&self) -> Vec<v1::LeaseRef> {
        self.live
            .difference(&self.expired)
            .map(|(key, token)| v1::LeaseRef {
                key: key.clone(),
                token: *token,
            })
            .collect()
    }

    fn refused(&mut self, refusal: &v1::Refusal, metrics: &ControllerMetrics, queue: &str) {
        let reason = v1::ErrorReason::try_from(refusal.reason)
            .map(|r| r.as_str_name())
            .unwrap_or("UNKNOWN");
        let k = (refusal.key.clone(), refusal.token);
        if self.live.contains(&k) {
            self.expired.insert(k); // a heartbeat's refusal: stop heartbeating it
        }
        metrics.refused(reason);
        tracing::warn!(queue, key = %refusal.key, token = refusal.token, reason, "informerd refused the outcome: {}", refusal.message);
    }
}

/// Sends the outcomes gathered so far as one message. A send fails only when the request stream
/// is gone: the stream is broken then, and its error arrives on the response side.
fn flush(
    outcomes: &mut Vec<v1::Outcome>,
    held: &mut Held,
    req_tx: &mpsc::UnboundedSender<ProcessRequest>,
    controller: &str,
) {
    held.answered(outcomes);
    let batch = v1::Outcomes {
        outcomes: std::mem::take(outcomes),
    };
    let request = ProcessRequest {
        kind: Some(process_request::Kind::Outcomes(batch)),
    };
    if req_tx.send(request).is_err() {
        tracing::debug!(controller, "outcomes not sent: the Work stream is closed");
    }
}

fn truncated(message: String) -> String {
    if message.len() <= MAX_ERROR_CHARS {
        return message;
    }
    let mut end = MAX_ERROR_CHARS;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

fn outcome(
    lease: &v1::Lease,
    result: outcome::Result,
    delay: Duration,
    error: String,
) -> v1::Outcome {
    v1::Outcome {
        key: lease.key.clone(),
        token: lease.token,
        result: result as i32,
        requeue_after_ms: delay.as_millis().try_into().unwrap_or(i64::MAX),
        error: truncated(error),
        priority: None,
    }
}

/// The outcome of a requeue `action` (kind Requeue or RateLimited): `result` at the action's
/// priority; one out of range is a failed reconcile instead (Retry at the lease's priority).
fn requeue_outcome(
    lease: &v1::Lease,
    result: outcome::Result,
    delay: Duration,
    error: String,
    priority: Option<i32>,
    span: &tracing::Span,
) -> Result<v1::Outcome, v1::Outcome> {
    match priority.map(|p| crate::queues::validate_priority(p, "Action::priority")) {
        Some(Err(e)) => {
            let message = e.to_string();
            span.in_scope(|| tracing::error!(error = %message, "Reconciler error"));
            Err(outcome(
                lease,
                outcome::Result::Retry,
                Duration::ZERO,
                message,
            ))
        }
        _ => Ok(v1::Outcome {
            priority,
            ..outcome(lease, result, delay, error)
        }),
    }
}

async fn reconcile_one<K, T, F>(
    run: &Run<K, T, F>,
    stream: &Arc<StreamInfo>,
    mut lease: v1::Lease,
) -> v1::Outcome
where
    K: DeserializeOwned + Send + Sync + 'static,
    T: Send + Sync + 'static,
    F: Reconciler<K, T>,
{
    let object = match lease.object.take() {
        Some(v1::LeaseObject {
            found: true,
            object: Some(o),
        }) => Object::from_proto(o),
        // Gone (deleted, or never there): nothing to reconcile, as in kube-runtime.
        _ => {
            return outcome(
                &lease,
                outcome::Result::Success,
                Duration::ZERO,
                String::new(),
            );
        }
    };
    let m = &run.metrics;
    let obj: Arc<K> = match object.decode() {
        Ok(k) => Arc::new(k),
        Err(e) => {
            // Retrying cannot help until the object changes, and a change enqueues it again.
            m.errors.inc();
            m.terminal_errors.inc();
            m.error.inc();
            tracing::error!(controller = %run.controller, key = %lease.key, token = lease.token, error = %e, "Reconciler error (the object does not decode)");
            return outcome(&lease, outcome::Result::Done, Duration::ZERO, e.to_string());
        }
    };
    let ctx = Context {
        data: run.context.clone(),
        lease: Arc::new(LeaseInfo {
            key: std::mem::take(&mut lease.key),
            token: lease.token,
            requeues: lease.requeues,
            priority: lease.priority,
            is_in_initial_list: lease.is_in_initial_list,
            cluster: std::mem::take(&mut lease.cluster),
            controller: run.controller.clone(),
            client: run.client.clone(),
            stream: stream.clone(),
        }),
    };
    let span = tracing::info_span!("reconcile", controller = %run.controller, key = %ctx.key(), token = ctx.token(), requeues = ctx.requeues());
    // Dropped with this future when the stream ends first: then it says so.
    let in_flight = InFlight::start(run, ctx.lease.clone());
    let started = Instant::now();
    let result = run
        .fns
        .reconcile(obj.clone(), ctx.clone())
        .instrument(span.clone())
        .await;
    m.time.observe(started.elapsed().as_secs_f64());
    lease.key = ctx.key().to_string();
    let (outcome, label) = match result {
        Ok(Action {
            kind: ActionKind::AwaitChange,
            ..
        }) => {
            m.success.inc();
            (
                outcome(
                    &lease,
                    outcome::Result::Success,
                    Duration::ZERO,
                    String::new(),
                ),
                "success",
            )
        }
        Ok(Action { kind, priority }) => {
            let (result, delay, counter, label) = match kind {
                ActionKind::Requeue(d) => (
                    outcome::Result::ForgetAndRequeueAfter,
                    d,
                    &m.requeue_after,
                    "requeue_after",
                ),
                _ => (
                    outcome::Result::Retry,
                    Duration::ZERO,
                    &m.requeue,
                    "requeue",
                ),
            };
            match requeue_outcome(&lease, result, delay, String::new(), priority, &span) {
                Ok(o) => {
                    counter.inc();
                    (o, label)
                }
                Err(o) => {
                    m.errors.inc();
                    m.error.inc();
                    (o, "error")
                }
            }
        }
        Err(e) => {
            m.errors.inc();
            m.error.inc();
            let message = e.to_string();
            span.in_scope(|| tracing::error!(error = %message, "Reconciler error"));
            let outcome = match run.fns.error_policy(obj, &e, ctx) {
                Action {
                    kind: ActionKind::Requeue(d),
                    priority,
                } => requeue_outcome(
                    &lease,
                    outcome::Result::RequeueAfter,
                    d,
                    message,
                    priority,
                    &span,
                )
                .unwrap_or_else(|o| o),
                Action {
                    kind: ActionKind::RateLimited,
                    priority,
                } => requeue_outcome(
                    &lease,
                    outcome::Result::Retry,
                    Duration::ZERO,
                    message,
                    priority,
                    &span,
                )
                .unwrap_or_else(|o| o),
                Action {
                    kind: ActionKind::AwaitChange,
                    ..
                } => {
                    m.terminal_errors.inc();
                    outcome(&lease, outcome::Result::Done, Duration::ZERO, message)
                }
            };
            (outcome, "error")
        }
    };
    in_flight.finish(label);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_truncation() {
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("v1"), "");
        assert_eq!(truncated("é".repeat(600)).len(), 1024);
        assert_eq!(truncated("short".into()), "short");
    }

    #[tokio::test]
    async fn bad_definitions_fail_run_naming_the_field() {
        let client = Client::connect_to("127.0.0.1:1").unwrap();
        let noop = |_: Arc<serde_json::Value>, _: Context<()>| async {
            Ok::<_, Error>(Action::await_change())
        };
        let policy = |_: Arc<serde_json::Value>, _: &Error, _: Context<()>| Action::await_change();
        let e = Controller::<serde_json::Value>::for_kind(client.clone(), "Bad", "v1", "ConfigMap")
            .run(noop, policy, Arc::new(()))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("Controller.name"));
        let e = Controller::<serde_json::Value>::for_kind(client.clone(), "ok", "v1", "ConfigMap")
            .concurrency(0)
            .run(noop, policy, Arc::new(()))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("Controller.concurrency"));
        let e = Controller::<serde_json::Value>::for_kind(client.clone(), "ok", "v1", "ConfigMap")
            .watches_kind("v1", "Secret", "by-secret", WatchConfig::default())
            .run(noop, policy, Arc::new(()))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("Controller.watches[0].index"));
        let e = Controller::<serde_json::Value>::for_kind(client, "ok", "v1", "ConfigMap")
            .resync(Duration::from_millis(5))
            .run(noop, policy, Arc::new(()))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("QueueSpec.resync_period"));
    }
}
