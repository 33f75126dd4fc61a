//! Work queues in the daemon (client-go workqueue semantics), fed by informer bindings.
//!
//! ```no_run
//! # async fn f(client: informerd::Client) -> informerd::Result<()> {
//! use informerd::{InformerSpec, Predicate, QueueSpec, RateLimiter, Source};
//! let cms = client.informers().ensure(InformerSpec::new("v1", "ConfigMap").namespace("demo")).await?;
//! let spec = QueueSpec::new("cm-hash")?
//!     .source(Source::object(&cms).predicate(Predicate::generation_changed()))
//!     .rate_limiter(RateLimiter::exponential(5, 60_000)?);
//! client.queues().create(spec).await?;
//! client.queues().add("cm-hash", ["demo/settings"]).await?;
//! # Ok(()) }
//! ```
//!
//! [`QueueSpec`] canonicalizes what it holds before it is sent (sources and predicates sorted,
//! duplicates dropped, the default rate limiter spelled out), byte for byte as the Python SDK
//! does, so processes in either language that mean the same queue send equal specs.
use std::time::Duration;

use informerd_api::v1::{
    self, AddAfterRequest, AddRateLimitedRequest, AddRequest, CreateQueueRequest,
    DeleteQueueRequest, ForgetRequest, GetQueueRequest, LenRequest, NumRequeuesRequest, QueueInfo,
    ShutDownRequest, UpdateQueueRequest, index_lookup, predicate, queue_source, rate_limiter_spec,
};
use prost::Message;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::informers::Informer;

const MAX_KEY_BYTES: usize = 1024;
const MAX_FIELD_PATHS: usize = 32;

/// A server-side filter of a source's update events (controller-runtime's predicates).
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate(v1::Predicate);

impl Predicate {
    /// Updates pass when metadata.generation changed (status writes do not change it).
    pub fn generation_changed() -> Self {
        Predicate(v1::Predicate {
            kind: Some(predicate::Kind::GenerationChanged(v1::GenerationChanged {})),
        })
    }

    /// Updates pass when metadata.labels changed.
    pub fn labels_changed() -> Self {
        Predicate(v1::Predicate {
            kind: Some(predicate::Kind::LabelsChanged(v1::LabelsChanged {})),
        })
    }

    /// Updates pass when metadata.annotations changed.
    pub fn annotations_changed() -> Self {
        Predicate(v1::Predicate {
            kind: Some(predicate::Kind::AnnotationsChanged(
                v1::AnnotationsChanged {},
            )),
        })
    }

    /// Updates pass when the value at any of these dotted field paths changed (1 to 32 paths).
    pub fn fields_changed<I: IntoIterator<Item = S>, S: Into<String>>(paths: I) -> Result<Self> {
        let mut paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        if paths.is_empty() {
            return Err(Error::invalid(
                "fields_changed",
                "give at least one field path",
            ));
        }
        for p in &paths {
            if p.is_empty() || p.starts_with('.') || p.ends_with('.') || p.contains("..") {
                return Err(Error::invalid(
                    "fields_changed",
                    format!("{p:?} is not a dotted field path"),
                ));
            }
        }
        paths.sort();
        paths.dedup();
        if paths.len() > MAX_FIELD_PATHS {
            return Err(Error::invalid(
                "fields_changed",
                format!("{} paths, at most {MAX_FIELD_PATHS}", paths.len()),
            ));
        }
        Ok(Predicate(v1::Predicate {
            kind: Some(predicate::Kind::FieldsChanged(v1::FieldsChanged {
                field_paths: paths,
            })),
        }))
    }
}

/// Where a queue's keys come from: an informer's events mapped to keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Source(v1::QueueSource);

fn informer_id(informer: impl Into<InformerRef>) -> String {
    informer.into().0
}

/// An informer, or its id.
pub struct InformerRef(String);

impl From<&Informer> for InformerRef {
    fn from(i: &Informer) -> Self {
        InformerRef(i.id().to_string())
    }
}

impl From<&str> for InformerRef {
    fn from(s: &str) -> Self {
        InformerRef(s.to_string())
    }
}

impl From<String> for InformerRef {
    fn from(s: String) -> Self {
        InformerRef(s)
    }
}

impl Source {
    /// Each event's object enqueues its own key (controller-runtime's `For`).
    pub fn object(informer: impl Into<InformerRef>) -> Self {
        Source(v1::QueueSource {
            informer_id: informer_id(informer),
            map_to: Some(queue_source::MapTo::Object(v1::ObjectKey {})),
            ..Default::default()
        })
    }

    /// Each event's object enqueues the key of its controller owner of `kind` in `group` (""
    /// for the core group; `None`: any group), controller-runtime's `Owns`.
    pub fn owner(
        informer: impl Into<InformerRef>,
        kind: impl Into<String>,
        group: Option<&str>,
    ) -> Self {
        Source(v1::QueueSource {
            informer_id: informer_id(informer),
            map_to: Some(queue_source::MapTo::Owner(v1::OwnerKey {
                kind: kind.into(),
                group: group.map(str::to_string),
                all_owners: false,
            })),
            ..Default::default()
        })
    }

    /// Each event's object enqueues the keys of `index_informer`'s objects whose index
    /// `index_name` holds the event object's key (`by_name`: its name), e.g. the Deployments
    /// that mount a changed ConfigMap.
    pub fn index(
        informer: impl Into<InformerRef>,
        index_informer: impl Into<InformerRef>,
        index_name: impl Into<String>,
        by_name: bool,
    ) -> Self {
        Source(v1::QueueSource {
            informer_id: informer_id(informer),
            map_to: Some(queue_source::MapTo::Index(v1::IndexLookup {
                informer_id: informer_id(index_informer),
                index_name: index_name.into(),
                value_from: if by_name {
                    index_lookup::ValueFrom::Name
                } else {
                    index_lookup::ValueFrom::Key
                } as i32,
            })),
            ..Default::default()
        })
    }

    /// For an owner source: every owner of the kind, not only the controller owner.
    pub fn all_owners(mut self) -> Self {
        if let Some(queue_source::MapTo::Owner(o)) = &mut self.0.map_to {
            o.all_owners = true;
        }
        self
    }

    /// Only objects matching this label selector.
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.0.label_selector = selector.into();
        self
    }

    /// Adds a predicate on update events (all must pass).
    pub fn predicate(mut self, p: Predicate) -> Self {
        self.0.predicates.push(p.0);
        self
    }

    /// The priority of this source's adds of objects from the informer's initial list (and of
    /// every object when the source is bound); unset: [`Source::changed_priority`]'s.
    /// controller-runtime gives them [`LOW_PRIORITY`]. Checked when the spec is sent.
    ///
    /// ```
    /// use informerd::queues::{Source, LOW_PRIORITY};
    ///
    /// // The initial list and unchanged resyncs wait behind changes, as controller-runtime does.
    /// let source = Source::object("informer-id")
    ///     .initial_list_priority(LOW_PRIORITY)
    ///     .unchanged_priority(LOW_PRIORITY);
    /// assert_eq!(source.into_proto().priorities.unwrap().initial_list, Some(-100));
    /// ```
    pub fn initial_list_priority(mut self, priority: i32) -> Self {
        self.0
            .priorities
            .get_or_insert_with(Default::default)
            .initial_list = Some(priority);
        self
    }

    /// The priority of adds of objects that did not change (the queue's resync, an informer
    /// update with the old resourceVersion); unset: [`Source::changed_priority`]'s.
    pub fn unchanged_priority(mut self, priority: i32) -> Self {
        self.0
            .priorities
            .get_or_insert_with(Default::default)
            .unchanged = Some(priority);
        self
    }

    /// The priority of every other add (creates, deletes, changes); unset: 0.
    pub fn changed_priority(mut self, priority: i32) -> Self {
        self.0
            .priorities
            .get_or_insert_with(Default::default)
            .changed = Some(priority);
        self
    }

    /// The wire form.
    pub fn into_proto(self) -> v1::QueueSource {
        self.0
    }
}

/// How long a retried key waits (client-go's rate limiters).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimiter(v1::RateLimiterSpec);

impl RateLimiter {
    /// client-go's DefaultControllerRateLimiter (also what an unset limiter means).
    pub fn default_controller() -> Self {
        RateLimiter(v1::RateLimiterSpec {
            kind: Some(rate_limiter_spec::Kind::DefaultController(
                v1::DefaultControllerLimiter {},
            )),
        })
    }

    /// `base_delay_ms * 2^failures`, at most `max_delay_ms`.
    pub fn exponential(base_delay_ms: i64, max_delay_ms: i64) -> Result<Self> {
        if base_delay_ms < 1 {
            return Err(Error::invalid(
                "base_delay_ms",
                format!("{base_delay_ms} is below 1"),
            ));
        }
        if max_delay_ms < base_delay_ms {
            return Err(Error::invalid(
                "max_delay_ms",
                format!("{max_delay_ms} is below base_delay_ms {base_delay_ms}"),
            ));
        }
        Ok(RateLimiter(v1::RateLimiterSpec {
            kind: Some(rate_limiter_spec::Kind::Exponential(
                v1::ExponentialLimiter {
                    base_delay_ms,
                    max_delay_ms,
                },
            )),
        }))
    }

    /// `fast_delay_ms` for the first `max_fast_attempts` failures, then `slow_delay_ms`.
    pub fn fast_slow(
        fast_delay_ms: i64,
        slow_delay_ms: i64,
        max_fast_attempts: i32,
    ) -> Result<Self> {
        for (field, v) in [
            ("fast_delay_ms", fast_delay_ms),
            ("slow_delay_ms", slow_delay_ms),
            ("max_fast_attempts", max_fast_attempts.into()),
        ] {
            if v < 0 {
                return Err(Error::invalid(field, format!("{v} is negative")));
            }
        }
        Ok(RateLimiter(v1::RateLimiterSpec {
            kind: Some(rate_limiter_spec::Kind::FastSlow(v1::FastSlowLimiter {
                fast_delay_ms,
                slow_delay_ms,
                max_fast_attempts,
            })),
        }))
    }

    /// A token bucket shared by all keys: `qps` per second, `burst` at once.
    pub fn bucket(qps: f64, burst: i32) -> Result<Self> {
        if !(qps > 0.0 && qps.is_finite()) {
            return Err(Error::invalid(
                "qps",
                format!("{qps}, want a positive number"),
            ));
        }
        if burst < 1 {
            return Err(Error::invalid(
                "burst",
                format!("{burst}, want a positive count"),
            ));
        }
        Ok(RateLimiter(v1::RateLimiterSpec {
            kind: Some(rate_limiter_spec::Kind::Bucket(v1::BucketLimiter {
                qps,
                burst,
            })),
        }))
    }

    /// The longest delay of several limiters (client-go's MaxOfRateLimiter).
    pub fn max_of<I: IntoIterator<Item = RateLimiter>>(limiters: I) -> Result<Self> {
        let limiters: Vec<v1::RateLimiterSpec> = limiters.into_iter().map(|l| l.0).collect();
        let spec = RateLimiter(v1::RateLimiterSpec {
            kind: Some(rate_limiter_spec::Kind::MaxOf(v1::MaxOfLimiter {
                limiters,
            })),
        });
        spec.canonical("max_of")
    }

    fn canonical(self, field: &str) -> Result<Self> {
        match self.0.kind {
            None => Err(Error::invalid(field, "an empty rate limiter (no kind set)")),
            Some(rate_limiter_spec::Kind::MaxOf(m)) => {
                if m.limiters.is_empty() {
                    return Err(Error::invalid(field, "max_of without limiters"));
                }
                let mut canon = Vec::with_capacity(m.limiters.len());
                for l in m.limiters {
                    canon.push(RateLimiter(l).canonical(field)?.0);
                }
                Ok(RateLimiter(v1::RateLimiterSpec {
                    kind: Some(rate_limiter_spec::Kind::MaxOf(v1::MaxOfLimiter {
                        limiters: sorted_unique(canon),
                    })),
                }))
            }
            Some(k) => Ok(RateLimiter(v1::RateLimiterSpec { kind: Some(k) })),
        }
    }
}

/// Sorted by serialized bytes, duplicates dropped: the order the Python SDK uses too.
fn sorted_unique<M: Message>(items: Vec<M>) -> Vec<M> {
    let mut keyed: Vec<(Vec<u8>, M)> = items.into_iter().map(|m| (m.encode_to_vec(), m)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    keyed.into_iter().map(|(_, m)| m).collect()
}

/// Checks a queue name: `[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters.
pub fn validate_queue_name(name: &str, field: &str) -> Result<()> {
    let ok_inner = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let ok_end = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.chars().all(ok_inner)
        && name.chars().next().is_some_and(ok_end)
        && name.chars().last().is_some_and(ok_end);
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "{name:?} is not a queue name ([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most 253 characters)"
            ),
        ))
    }
}

/// A queue's definition. Built with [`QueueSpec::new`] and the builder methods; canonicalized
/// when sent.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec(v1::QueueSpec);

impl QueueSpec {
    /// A queue named `name` with no sources (keys only from [`Queues::add`]) and the default
    /// rate limiter.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        validate_queue_name(&name, "QueueSpec.name")?;
        Ok(QueueSpec(v1::QueueSpec {
            name,
            ..Default::default()
        }))
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Adds a source.
    pub fn source(mut self, source: Source) -> Self {
        self.0.sources.push(source.0);
        self
    }

    /// The rate limiter of retried keys.
    pub fn rate_limiter(mut self, limiter: RateLimiter) -> Self {
        self.0.rate_limiter = Some(limiter.0);
        self
    }

    /// Re-add every key of the object sources this often (at least 1 s; zero: never).
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.0.resync_period_ms = period.as_millis().try_into().unwrap_or(i64::MAX);
        self
    }

    /// A handed-out key not answered or heartbeated within this long goes back to the queue
    /// (1 s to 1 day; zero: never).
    pub fn lease_timeout(mut self, timeout: Duration) -> Self {
        self.0.lease_timeout_ms = timeout.as_millis().try_into().unwrap_or(i64::MAX);
        self
    }

    /// How long a key waits at most before it goes ahead of higher priorities (1 s to 1 day;
    /// zero: the daemon's default, one minute).
    pub fn priority_aging(mut self, aging: Duration) -> Self {
        // Under a millisecond is not zero (the default): rounded up, so that it is refused.
        let ms = aging.as_millis().max(u128::from(!aging.is_zero()));
        self.0.priority_aging_ms = ms.try_into().unwrap_or(i64::MAX);
        self
    }

    /// The canonical wire form: equal intents give equal bytes.
    pub fn canonical(&self) -> Result<v1::QueueSpec> {
        let mut spec = self.0.clone();
        validate_queue_name(&spec.name, "QueueSpec.name")?;
        let mut sources = Vec::with_capacity(spec.sources.len());
        for (i, mut s) in std::mem::take(&mut spec.sources).into_iter().enumerate() {
            if s.informer_id.is_empty() {
                return Err(Error::invalid(
                    format!("QueueSpec.sources[{i}].informer_id"),
                    "empty",
                ));
            }
            if s.map_to.is_none() {
                s.map_to = Some(queue_source::MapTo::Object(v1::ObjectKey {}));
            }
            for (j, p) in s.predicates.iter_mut().enumerate() {
                match &mut p.kind {
                    None => {
                        return Err(Error::invalid(
                            format!("QueueSpec.sources[{i}].predicates[{j}]"),
                            "an empty predicate",
                        ));
                    }
                    Some(predicate::Kind::FieldsChanged(f)) => {
                        f.field_paths.sort();
                        f.field_paths.dedup();
                    }
                    Some(_) => {}
                }
            }
            s.predicates = sorted_unique(std::mem::take(&mut s.predicates));
            if let Some(p) = &s.priorities {
                for (name, value) in [
                    ("initial_list", p.initial_list),
                    ("unchanged", p.unchanged),
                    ("changed", p.changed),
                ] {
                    if let Some(v) = value {
                        validate_priority(v, &format!("QueueSpec.sources[{i}].priorities.{name}"))?;
                    }
                }
            }
            sources.push(s);
        }
        spec.sources = sorted_unique(sources);
        spec.rate_limiter = Some(match spec.rate_limiter.take() {
            None => RateLimiter::default_controller().0,
            Some(l) => RateLimiter(l).canonical("QueueSpec.rate_limiter")?.0,
        });
        if spec.resync_period_ms != 0 && spec.resync_period_ms < 1000 {
            return Err(Error::invalid(
                "QueueSpec.resync_period",
                format!("{} ms, want 0 or at least 1 s", spec.resync_period_ms),
            ));
        }
        if spec.lease_timeout_ms != 0 && !(1000..=86_400_000).contains(&spec.lease_timeout_ms) {
            return Err(Error::invalid(
                "QueueSpec.lease_timeout",
                format!("{} ms, want 0 or 1 s .. 1 day", spec.lease_timeout_ms),
            ));
        }
        if spec.priority_aging_ms != 0 && !(1000..=86_400_000).contains(&spec.priority_aging_ms) {
            return Err(Error::invalid(
                "QueueSpec.priority_aging",
                format!("{} ms, want 0 or 1 s .. 1 day", spec.priority_aging_ms),
            ));
        }
        Ok(spec)
    }
}

fn keys<I: IntoIterator<Item = S>, S: Into<String>>(keys: I) -> Result<Vec<String>> {
    let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
    for k in &keys {
        if k.is_empty() || k.len() > MAX_KEY_BYTES {
            return Err(Error::invalid(
                "keys",
                format!("{k:?} must be non-empty and at most {MAX_KEY_BYTES} bytes"),
            ));
        }
    }
    Ok(keys)
}

fn millis(d: Duration) -> i64 {
    d.as_millis().try_into().unwrap_or(i64::MAX)
}

/// controller-runtime's `priorityqueue.LowPriority`: what it gives the initial list and
/// unchanged resyncs ([`Source::initial_list_priority`]).
pub const LOW_PRIORITY: i32 = -100;

/// The lowest priority a key may wait at (`AddRequest.priority`).
pub const MIN_PRIORITY: i32 = -1_000_000;
/// The highest priority a key may wait at; higher is handed out first.
pub const MAX_PRIORITY: i32 = 1_000_000;

/// Checks a priority: in [`MIN_PRIORITY`]`..=`[`MAX_PRIORITY`], as the daemon requires.
pub fn validate_priority(priority: i32, field: &str) -> Result<i32> {
    if (MIN_PRIORITY..=MAX_PRIORITY).contains(&priority) {
        Ok(priority)
    } else {
        Err(Error::invalid(
            field,
            format!("must be in {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority}"),
        ))
    }
}

/// How [`Queues::add_with_opts`] adds keys (controller-runtime's `priorityqueue.AddOpts`).
///
/// ```
/// use std::time::Duration;
/// use informerd::queues::AddOpts;
///
/// // In a minute, ahead of every key waiting at the default priority.
/// let opts = AddOpts { after: Some(Duration::from_secs(60)), priority: Some(10), ..AddOpts::default() };
/// assert!(!opts.rate_limited);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddOpts {
    /// Add once this delay has passed (None: now).
    pub after: Option<Duration>,
    /// Add after the queue's rate limiter's delay for each key (counts as a retry); not with
    /// `after`.
    pub rate_limited: bool,
    /// Wait at this priority (None: 0): higher is handed out first, FIFO within a priority, and
    /// a key already waiting keeps the higher of its two priorities.
    pub priority: Option<i32>,
}

/// `client.queues()`: create, change and feed queues in the daemon. Specs created or updated
/// here are remembered on the client, so [`Client::reensure`] brings the queue back after a
/// daemon restart. In a replica set every call goes to the leader, following
/// [`Error::NotLeader`] answers within the call's deadline ([`Client::on_leader`]).
#[derive(Clone, Debug)]
pub struct Queues {
    client: Client,
}

impl Client {
    /// The queue API.
    pub fn queues(&self) -> Queues {
        Queues {
            client: self.clone(),
        }
    }
}

impl Queues {
    /// Creates the queue; a no-op with an equal spec, FAILED_PRECONDITION
    /// (QUEUE_EXISTS_WITH_OTHER_SPEC) with another one.
    pub async fn create(&self, spec: QueueSpec) -> Result<QueueInfo> {
        let spec = spec.canonical()?;
        let info = self
            .client
            .leader_unary(
                "CreateQueue",
                None,
                CreateQueueRequest {
                    spec: Some(spec.clone()),
                },
                |mut rpc, r| async move { rpc.create_queue(r).await },
            )
            .await?;
        self.client.remember_queue(&spec);
        Ok(info)
    }

    /// Changes a running queue in place (keys, retries and leases kept); with `allow_missing`
    /// creates it if it does not exist (else NOT_FOUND).
    pub async fn update(&self, spec: QueueSpec, allow_missing: bool) -> Result<QueueInfo> {
        let spec = spec.canonical()?;
        let info = self
            .client
            .leader_unary(
                "UpdateQueue",
                None,
                UpdateQueueRequest {
                    spec: Some(spec.clone()),
                    allow_missing,
                },
                |mut rpc, r| async move { rpc.update_queue(r).await },
            )
            .await?;
        self.client.remember_queue(&spec);
        Ok(info)
    }

    /// Shuts the queue down without draining and removes it (Work streams on it end).
    pub async fn delete(&self, queue: &str) -> Result<()> {
        validate_queue_name(queue, "queue")?;
        self.client
            .leader_unary(
                "DeleteQueue",
                None,
                DeleteQueueRequest {
                    queue: queue.into(),
                },
                |mut rpc, r| async move { rpc.delete_queue(r).await },
            )
            .await?;
        self.client.forget_queue(queue);
        Ok(())
    }

    /// The queue's spec and state (depth, in flight, delayed, workers ...).
    pub async fn get(&self, queue: &str) -> Result<QueueInfo> {
        validate_queue_name(queue, "queue")?;
        self.client
            .leader_unary(
                "GetQueue",
                None,
                GetQueueRequest {
                    queue: queue.into(),
                },
                |mut rpc, r| async move { rpc.get_queue(r).await },
            )
            .await
    }

    /// Adds keys now (deduplicated with waiting ones).
    pub async fn add<I: IntoIterator<Item = S>, S: Into<String>>(
        &self,
        queue: &str,
        keys_: I,
    ) -> Result<()> {
        self.add_with_opts(queue, keys_, AddOpts::default()).await
    }

    /// Adds keys after `delay`.
    pub async fn add_after<I: IntoIterator<Item = S>, S: Into<String>>(
        &self,
        queue: &str,
        keys_: I,
        delay: Duration,
    ) -> Result<()> {
        let opts = AddOpts {
            after: Some(delay),
            ..AddOpts::default()
        };
        self.add_with_opts(queue, keys_, opts).await
    }

    /// Adds keys after the queue's rate limiter's delay (counts as a retry).
    pub async fn add_rate_limited<I: IntoIterator<Item = S>, S: Into<String>>(
        &self,
        queue: &str,
        keys_: I,
    ) -> Result<()> {
        let opts = AddOpts {
            rate_limited: true,
            ..AddOpts::default()
        };
        self.add_with_opts(queue, keys_, opts).await
    }

    /// Adds keys as `opts` says: now, after a delay or rate-limited, at a priority
    /// (controller-runtime's `AddWithOpts`). `after` with `rate_limited`, or a priority out of
    /// [`MIN_PRIORITY`]`..=`[`MAX_PRIORITY`], is [`Error::InvalidArgument`] naming the field.
    pub async fn add_with_opts<I: IntoIterator<Item = S>, S: Into<String>>(
        &self,
        queue: &str,
        keys_: I,
        opts: AddOpts,
    ) -> Result<()> {
        validate_queue_name(queue, "queue")?;
        let keys = keys(keys_)?;
        let priority = opts
            .priority
            .map(|p| validate_priority(p, "priority"))
            .transpose()?;
        let queue = queue.to_string();
        match (opts.after, opts.rate_limited) {
            (Some(_), true) => Err(Error::invalid(
                "rate_limited",
                "cannot be combined with after (the rate limiter decides the delay)",
            )),
            (None, true) => {
                self.client
                    .leader_unary(
                        "AddRateLimited",
                        None,
                        AddRateLimitedRequest {
                            queue,
                            keys,
                            priority,
                        },
                        |mut rpc, r| async move { rpc.add_rate_limited(r).await },
                    )
                    .await?;
                Ok(())
            }
            (Some(delay), false) => {
                self.client
                    .leader_unary(
                        "AddAfter",
                        None,
                        AddAfterRequest {
                            queue,
                            keys,
                            delay_ms: millis(delay),
                            priority,
                        },
                        |mut rpc, r| async move { rpc.add_after(r).await },
                    )
                    .await?;
                Ok(())
            }
            (None, false) => {
                self.client
                    .leader_unary(
                        "Add",
                        None,
                        AddRequest {
                            queue,
                            keys,
                            priority,
                        },
                        |mut rpc, r| async move { rpc.add(r).await },
                    )
                    .await?;
                Ok(())
            }
        }
    }

    /// Resets the keys' retry counts.
    pub async fn forget<I: IntoIterator<Item = S>, S: Into<String>>(
        &self,
        queue: &str,
        keys_: I,
    ) -> Result<()> {
        validate_queue_name(queue, "queue")?;
        let keys = keys(keys_)?;
        self.client
            .leader_unary(
                "Forget",
                None,
                ForgetRequest {
                    queue: queue.into(),
                    keys,
                },
                |mut rpc, r| async move { rpc.forget(r).await },
            )
            .await?;
        Ok(())
    }

    /// How often `key` was retried so far.
    pub async fn num_requeues(&self, queue: &str, key: &str) -> Result<i64> {
        validate_queue_name(queue, "queue")?;
        let key = keys([key])?.remove(0);
        let resp = self
            .client
            .leader_unary(
                "NumRequeues",
                None,
                NumRequeuesRequest {
                    queue: queue.into(),
                    key,
                },
                |mut rpc, r| async move { rpc.num_requeues(r).await },
            )
            .await?;
        Ok(resp.requeues)
    }

    /// Keys waiting (client-go's Len).
    pub async fn len(&self, queue: &str) -> Result<u64> {
        validate_queue_name(queue, "queue")?;
        Ok(self
            .client
            .leader_unary(
                "Len",
                None,
                LenRequest {
                    queue: queue.into(),
                },
                |mut rpc, r| async move { rpc.len(r).await },
            )
            .await?
            .len)
    }

    /// Stops handing out keys; with `drain` returns once every key handed out is done.
    pub async fn shut_down(&self, queue: &str, drain: bool) -> Result<()> {
        validate_queue_name(queue, "queue")?;
        self.client
            .leader_unary(
                "ShutDown",
                None,
                ShutDownRequest {
                    queue: queue.into(),
                    drain,
                },
                |mut rpc, r| async move { rpc.shut_down(r).await },
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_intents_give_equal_bytes() {
        let a = QueueSpec::new("q")
            .unwrap()
            .source(
                Source::object("inf-b")
                    .predicate(Predicate::labels_changed())
                    .predicate(Predicate::generation_changed()),
            )
            .source(Source::owner("inf-a", "ReplicaSet", Some("apps")))
            .source(
                Source::object("inf-b")
                    .predicate(Predicate::generation_changed())
                    .predicate(Predicate::labels_changed()),
            );
        let b = QueueSpec::new("q")
            .unwrap()
            .source(Source::owner("inf-a", "ReplicaSet", Some("apps")))
            .source(
                Source::object("inf-b")
                    .predicate(Predicate::generation_changed())
                    .predicate(Predicate::labels_changed()),
            )
            .rate_limiter(RateLimiter::default_controller());
        let (a, b) = (a.canonical().unwrap(), b.canonical().unwrap());
        assert_eq!(a.encode_to_vec(), b.encode_to_vec());
        assert_eq!(a.sources.len(), 2);
    }

    #[test]
    fn bad_arguments_name_the_field() {
        assert_eq!(
            QueueSpec::new("Bad_Name").unwrap_err().field(),
            Some("QueueSpec.name")
        );
        assert_eq!(
            QueueSpec::new("").unwrap_err().field(),
            Some("QueueSpec.name")
        );
        assert_eq!(
            RateLimiter::exponential(0, 10).unwrap_err().field(),
            Some("base_delay_ms")
        );
        assert_eq!(
            RateLimiter::exponential(10, 5).unwrap_err().field(),
            Some("max_delay_ms")
        );
        assert_eq!(
            RateLimiter::bucket(f64::NAN, 1).unwrap_err().field(),
            Some("qps")
        );
        assert_eq!(
            Predicate::fields_changed(["a..b"]).unwrap_err().field(),
            Some("fields_changed")
        );
        assert_eq!(
            Predicate::fields_changed(Vec::<String>::new())
                .unwrap_err()
                .field(),
            Some("fields_changed")
        );
        let e = QueueSpec::new("q")
            .unwrap()
            .resync_period(Duration::from_millis(10))
            .canonical()
            .unwrap_err();
        assert_eq!(e.field(), Some("QueueSpec.resync_period"));
        let e = QueueSpec::new("q")
            .unwrap()
            .source(Source::object(""))
            .canonical()
            .unwrap_err();
        assert_eq!(e.field(), Some("QueueSpec.sources[0].informer_id"));
        assert_eq!(keys([""]).unwrap_err().field(), Some("keys"));
        assert!(keys(["x".repeat(1025)]).is_err());
    }

    #[test]
    fn max_of_is_sorted_and_deduplicated() {
        let l = RateLimiter::max_of([
            RateLimiter::exponential(5, 100).unwrap(),
            RateLimiter::bucket(10.0, 100).unwrap(),
            RateLimiter::exponential(5, 100).unwrap(),
        ])
        .unwrap();
        match l.0.kind {
            Some(rate_limiter_spec::Kind::MaxOf(m)) => assert_eq!(m.limiters.len(), 2),
            other => panic!("{other:?}"),
        }
    }
}
