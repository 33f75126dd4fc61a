//! Informers in the daemon: ensure, wait for sync, get, list, watch.
//!
//! ```no_run
//! # async fn f(client: informerd::Client) -> informerd::Result<()> {
//! use futures::StreamExt;
//! use informerd::{Event, IndexSpec, InformerSpec, WatchParams};
//! let pods = client
//!     .informers()
//!     .ensure(InformerSpec::new("v1", "Pod").namespace("demo").index(IndexSpec::label("by-app", "app")))
//!     .await?;
//! pods.wait_for_sync(std::time::Duration::from_secs(60)).await?;
//! for pod in pods.list(informerd::ListParams::default().index("by-app", "web")).await? {
//!     println!("{}", pod.key());
//! }
//! let mut events = pods.watch(WatchParams::default());
//! while let Some(event) = events.next().await {
//!     match event? {
//!         Event::Added { object, .. } | Event::Updated { object, .. } => println!("{}", object.key()),
//!         Event::Deleted { object, .. } => println!("gone: {}", object.key()),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A watch reconnects by itself after a transient failure (the daemon restarted, the network
//! broke): it yields [`Event::Reconnecting`], waits with jittered backoff, ensures the informer
//! again and opens a new stream, which starts over with the current objects (`initial`), then
//! [`Event::Synced`]. A key seen before `Reconnecting` that is not among the new initial objects
//! was deleted meanwhile ([`crate::Store`] handles this). Other errors end the stream.
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use informerd_api::v1::{
    self, DeleteInformerRequest, EnsureInformerRequest, GetInformerRequest, GetRequest,
    GroupVersionResource, InformerInfo, ListRequest, OwnerIndex, TransformSpec, WaitForSyncRequest,
    WatchRequest, index_spec, watch_event,
};
use tokio::sync::mpsc;

use crate::client::{Backoff, Client};
use crate::error::{Error, ErrorReason, Result};
use crate::object::Object;

const MAX_BATCH_SIZE: u32 = 10_000;
const MAX_BATCH_BYTES: u32 = 64 << 20;

/// An index the daemon keeps on an informer's cache (usable in [`ListParams::index`] and by
/// queue sources).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec(v1::IndexSpec);

impl IndexSpec {
    /// By the value of one label.
    pub fn label(name: impl Into<String>, label_key: impl Into<String>) -> Self {
        IndexSpec(v1::IndexSpec {
            name: name.into(),
            kind: Some(index_spec::Kind::LabelKey(label_key.into())),
        })
    }

    /// By the value(s) of a dotted field path, arrays walked, e.g. `spec.volumes.configMap.name`.
    pub fn field(name: impl Into<String>, field_path: impl Into<String>) -> Self {
        IndexSpec(v1::IndexSpec {
            name: name.into(),
            kind: Some(index_spec::Kind::FieldPath(field_path.into())),
        })
    }

    /// By owner: `Kind/name` of the controller owner (of `kind` when not empty; every owner with
    /// `all_owners`), or the owner's uid with `by_uid`.
    pub fn owner(
        name: impl Into<String>,
        kind: impl Into<String>,
        all_owners: bool,
        by_uid: bool,
    ) -> Self {
        IndexSpec(v1::IndexSpec {
            name: name.into(),
            kind: Some(index_spec::Kind::Owner(OwnerIndex {
                kind: kind.into(),
                all_owners,
                by_uid,
            })),
        })
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The wire form.
    pub fn into_proto(self) -> v1::IndexSpec {
        self.0
    }
}

/// What the daemon keeps of each object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transform(TransformSpec);

impl Transform {
    /// Keep only metadata (and apiVersion/kind).
    pub fn metadata_only() -> Self {
        Transform(TransformSpec {
            metadata_only: true,
            ..Default::default()
        })
    }

    /// Also keep metadata.managedFields (dropped by default).
    pub fn keep_managed_fields(mut self) -> Self {
        self.0.keep_managed_fields = true;
        self
    }

    /// Drop these dotted paths.
    pub fn drop_paths<I: IntoIterator<Item = S>, S: Into<String>>(mut self, paths: I) -> Self {
        self.0.drop_paths.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Keep only these dotted paths (metadata is always kept).
    pub fn keep_paths<I: IntoIterator<Item = S>, S: Into<String>>(mut self, paths: I) -> Self {
        self.0.keep_paths.extend(paths.into_iter().map(Into::into));
        self
    }
}

/// What to inform on: a resource (by apiVersion and kind, or by group/version/resource), a
/// namespace (all when empty), selectors, indexes, and a transform. Equal specs name the same
/// informer, shared by every client of the daemon.
#[derive(Clone, Debug, PartialEq)]
pub struct InformerSpec(v1::InformerSpec);

impl InformerSpec {
    /// The informer of `kind` in `api_version` (e.g. `"v1"`, `"ConfigMap"` or `"apps/v1"`,
    /// `"Deployment"`), all namespaces.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        InformerSpec(v1::InformerSpec {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Default::default()
        })
    }

    /// The informer of a resource named by group, version and plural resource name.
    pub fn resource(
        group: impl Into<String>,
        version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        InformerSpec(v1::InformerSpec {
            resource: Some(GroupVersionResource {
                group: group.into(),
                version: version.into(),
                resource: resource.into(),
            }),
            ..Default::default()
        })
    }

    /// The informer for the resource type `K` (its apiVersion and kind).
    pub fn of<K: crate::Resource>() -> Self {
        InformerSpec::new(K::api_version(), K::kind())
    }

    /// Only this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.0.namespace = namespace.into();
        self
    }

    /// Only objects matching this label selector (Kubernetes syntax).
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.0.label_selector = selector.into();
        self
    }

    /// Only objects matching this field selector (Kubernetes syntax).
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.0.field_selector = selector.into();
        self
    }

    /// Another cluster of the daemon's config (the default cluster when not set).
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.0.cluster = cluster.into();
        self
    }

    /// Adds an index.
    pub fn index(mut self, index: IndexSpec) -> Self {
        self.0.indexes.push(index.0);
        self
    }

    /// What to keep of each object.
    pub fn transform(mut self, transform: Transform) -> Self {
        self.0.transform = Some(transform.0);
        self
    }

    /// The wire form.
    pub fn as_proto(&self) -> &v1::InformerSpec {
        &self.0
    }

    fn check(&self) -> Result<()> {
        let s = &self.0;
        match &s.resource {
            Some(r) if !s.kind.is_empty() || !s.api_version.is_empty() => {
                let _ = r;
                Err(Error::invalid(
                    "InformerSpec.resource",
                    "give a resource or an apiVersion and kind, not both",
                ))
            }
            Some(r) if r.version.is_empty() || r.resource.is_empty() => Err(Error::invalid(
                "InformerSpec.resource",
                "version and resource are required",
            )),
            Some(_) => Ok(()),
            None if s.kind.is_empty() => Err(Error::invalid(
                "InformerSpec.kind",
                "empty (e.g. \"ConfigMap\")",
            )),
            None if s.api_version.is_empty() => Err(Error::invalid(
                "InformerSpec.api_version",
                "empty (e.g. \"v1\" or \"apps/v1\")",
            )),
            None => Ok(()),
        }
    }
}

/// `client.informers()`: informers in the daemon.
#[derive(Clone, Debug)]
pub struct Informers {
    client: Client,
}

impl Client {
    /// The informer API.
    pub fn informers(&self) -> Informers {
        Informers {
            client: self.clone(),
        }
    }
}

impl Informers {
    /// Starts the informer for `spec` unless it runs, and returns a handle on it. Remembered on
    /// the client, so that [`Client::reensure`] brings it back after a daemon restart.
    pub async fn ensure(&self, spec: InformerSpec) -> Result<Informer> {
        spec.check()?;
        let mut rpc = self.client.informers_raw();
        let info = self
            .client
            .unary(
                "EnsureInformer",
                None,
                EnsureInformerRequest {
                    spec: Some(spec.0.clone()),
                },
                |r| rpc.ensure_informer(r),
            )
            .await?;
        self.client.remember_informer(&info.id, &spec.0);
        Ok(Informer {
            client: self.client.clone(),
            spec: spec.0,
            info,
        })
    }

    /// A handle on a running informer by id.
    pub async fn get(&self, informer_id: &str) -> Result<Informer> {
        let mut rpc = self.client.informers_raw();
        let info = self
            .client
            .unary(
                "GetInformer",
                None,
                GetInformerRequest {
                    informer_id: informer_id.to_string(),
                },
                |r| rpc.get_informer(r),
            )
            .await?;
        let spec = info.spec.clone().unwrap_or_default();
        Ok(Informer {
            client: self.client.clone(),
            spec,
            info,
        })
    }
}

/// Filters and batch bounds of [`Informer::list`].
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    request: ListRequest,
}

impl ListParams {
    /// Only this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.request.namespace = namespace.into();
        self
    }

    /// Only objects matching this label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.request.label_selector = selector.into();
        self
    }

    /// Only objects matching this field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.request.field_selector = selector.into();
        self
    }

    /// Only objects whose index `name` (one of the informer's, or `"namespace"`) holds `value`.
    pub fn index(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.index_name = name.into();
        self.request.index_value = value.into();
        self
    }

    /// At most this many objects per streamed response (0: the daemon's 500; at most 10000).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.request.batch_size = n;
        self
    }

    /// At most this many bytes per streamed response (0: the daemon's 2 MiB; at most 64 MiB).
    pub fn max_batch_bytes(mut self, n: u32) -> Self {
        self.request.max_batch_bytes = n;
        self
    }
}

/// Bounds of [`Informer::watch`].
#[derive(Clone, Debug)]
pub struct WatchParams {
    request: WatchRequest,
    reconnect: bool,
    backoff: Backoff,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            request: WatchRequest::default(),
            reconnect: true,
            backoff: Backoff::default(),
        }
    }
}

impl WatchParams {
    /// How many events the daemon keeps for this subscriber before it re-snapshots (0: 4096).
    pub fn buffer_size(mut self, n: u32) -> Self {
        self.request.buffer_size = n;
        self
    }

    /// At most this many events per response (0: 256).
    pub fn max_batch(mut self, n: u32) -> Self {
        self.request.max_batch = n;
        self
    }

    /// At most this many bytes per response (0: 2 MiB).
    pub fn max_batch_bytes(mut self, n: u32) -> Self {
        self.request.max_batch_bytes = n;
        self
    }

    /// Only objects of namespace `ns` (the snapshot and the changes). A caller allowed to list
    /// and watch the resource in one namespace only reads a cluster-wide informer this way.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.request.namespace = ns.into();
        self
    }

    /// Fill [`Event::Updated::old`].
    pub fn include_old_object(mut self) -> Self {
        self.request.include_old_object = true;
        self
    }

    /// End the stream with the error instead of reconnecting.
    pub fn no_reconnect(mut self) -> Self {
        self.reconnect = false;
        self
    }

    /// How to space reconnect attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

/// One change of an informer's cache, as [`Informer::watch`] yields it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// An object appeared; `initial` for the objects of a (re)start's snapshot.
    Added {
        /// The object.
        object: Object,
        /// Part of the snapshot a stream starts with.
        initial: bool,
    },
    /// An object changed.
    Updated {
        /// The new state.
        object: Object,
        /// The previous state, with [`WatchParams::include_old_object`].
        old: Option<Object>,
    },
    /// An object went away.
    Deleted {
        /// The last known state.
        object: Object,
        /// The deletion was noticed by a relist (client-go's `DeletedFinalStateUnknown`): the
        /// state may be stale.
        tombstone: bool,
    },
    /// The snapshot has been sent; changes follow.
    Synced,
    /// This subscriber fell behind: `keys` events follow, each the net change of one key.
    Resnapshot {
        /// How many.
        keys: u64,
    },
    /// The stream broke and is being opened again; a new snapshot follows.
    Reconnecting {
        /// Why.
        error: std::sync::Arc<Error>,
    },
}

impl Event {
    fn from_proto(e: v1::WatchEvent) -> Result<Event> {
        let object = || {
            e.object.clone().map(Object::from_proto).ok_or_else(|| {
                Error::Protocol(format!("a {:?} event without an object", e.r#type()))
            })
        };
        Ok(match e.r#type() {
            watch_event::Type::Added => Event::Added {
                object: object()?,
                initial: e.initial,
            },
            watch_event::Type::Updated => Event::Updated {
                object: object()?,
                old: e.old_object.clone().map(Object::from_proto),
            },
            watch_event::Type::Deleted => Event::Deleted {
                object: object()?,
                tombstone: e.tombstone,
            },
            watch_event::Type::Synced => Event::Synced,
            watch_event::Type::Resnapshot => Event::Resnapshot {
                keys: e.resnapshot_keys,
            },
            watch_event::Type::Unspecified => {
                return Err(Error::Protocol("a watch event without a type".into()));
            }
        })
    }
}

/// A handle on one running informer (cheap to clone; many handles may name one informer).
#[derive(Clone, Debug)]
pub struct Informer {
    client: Client,
    spec: v1::InformerSpec,
    info: InformerInfo,
}

fn count(field: &str, value: u32, max: u32) -> Result<u32> {
    if value > max {
        return Err(Error::invalid(field, format!("{value} is above {max}")));
    }
    Ok(value)
}

impl Informer {
    /// The informer's id (stable for an equal spec, across daemon restarts).
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// The info the daemon last reported (spec, state, kind, scope).
    pub fn info(&self) -> &InformerInfo {
        &self.info
    }

    /// The resource's kind as the daemon resolved it.
    pub fn kind(&self) -> &str {
        &self.info.kind
    }

    /// Whether the resource is namespaced.
    pub fn namespaced(&self) -> bool {
        self.info.namespaced
    }

    /// The spec it was ensured with.
    pub fn spec(&self) -> &v1::InformerSpec {
        &self.spec
    }

    /// The client it was made with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Fetches the informer's current info.
    pub async fn refresh(&mut self) -> Result<&InformerInfo> {
        let mut rpc = self.client.informers_raw();
        self.info = self
            .client
            .unary(
                "GetInformer",
                None,
                GetInformerRequest {
                    informer_id: self.info.id.clone(),
                },
                |r| rpc.get_informer(r),
            )
            .await?;
        Ok(&self.info)
    }

    /// Returns once the informer's first list is in its cache; after `timeout` fails with reason
    /// NOT_SYNCED, saying what the reflector is doing and its last error.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<InformerInfo> {
        let mut rpc = self.client.informers_raw();
        let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        self.client
            .unary(
                "WaitForSync",
                Some(timeout + Duration::from_secs(5)),
                WaitForSyncRequest {
                    informer_id: self.info.id.clone(),
                    timeout_ms,
                },
                |r| rpc.wait_for_sync(r),
            )
            .await
    }

    /// The cached object with `key` (`namespace/name` or `name`).
    pub async fn get(&self, key: &str) -> Result<Option<Object>> {
        let mut rpc = self.client.informers_raw();
        let resp = self
            .client
            .unary(
                "Get",
                None,
                GetRequest {
                    informer_id: self.info.id.clone(),
                    key: key.to_string(),
                },
                |r| rpc.get(r),
            )
            .await?;
        Ok(if resp.found {
            resp.object.map(Object::from_proto)
        } else {
            None
        })
    }

    /// The cached object with `key`, decoded as `K`.
    pub async fn get_as<K: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<K>> {
        self.get(key).await?.map(|o| o.decode()).transpose()
    }

    /// Objects from the daemon's cache, filtered there. The whole stream is read within the
    /// client's deadline.
    pub async fn list(&self, params: ListParams) -> Result<Vec<Object>> {
        let mut out = Vec::new();
        let mut batches = self.list_batches(params);
        while let Some(batch) = batches.next().await {
            out.extend(batch?);
        }
        Ok(out)
    }

    /// Objects from the daemon's cache as they are streamed, one batch at a time (nothing holds
    /// them all at once). The whole stream must be read within the client's deadline.
    pub fn list_batches(
        &self,
        params: ListParams,
    ) -> futures::stream::BoxStream<'static, Result<Vec<Object>>> {
        let client = self.client.clone();
        let mut request = params.request;
        request.informer_id = self.info.id.clone();
        let timeout = client.options().default_timeout();
        let checked = count("ListParams.batch_size", request.batch_size, MAX_BATCH_SIZE)
            .and_then(|_| {
                count(
                    "ListParams.max_batch_bytes",
                    request.max_batch_bytes,
                    MAX_BATCH_BYTES,
                )
            })
            .and_then(|_| {
                if request.index_name.is_empty() && !request.index_value.is_empty() {
                    Err(Error::invalid(
                        "ListParams.index",
                        "a value without an index name",
                    ))
                } else {
                    Ok(())
                }
            });
        let deadline = tokio::time::Instant::now() + timeout;
        futures::stream::once(async move {
            checked?;
            let mut rpc = client.informers_raw();
            let mut req = tonic::Request::new(request);
            req.set_timeout(timeout);
            match tokio::time::timeout_at(deadline, rpc.list(req)).await {
                Ok(r) => Ok(r?.into_inner()),
                Err(_) => Err(Error::Timeout {
                    what: "List".into(),
                    seconds: timeout.as_secs_f64(),
                }),
            }
        })
        .map(move |opened: Result<tonic::Streaming<v1::ListResponse>>| {
            futures::stream::unfold(Some(opened), move |state| async move {
                let streaming = match state? {
                    Ok(s) => s,
                    Err(e) => return Some((Err(e), None)),
                };
                let mut streaming = streaming;
                match tokio::time::timeout_at(deadline, streaming.message()).await {
                    Err(_) => Some((
                        Err(Error::Timeout {
                            what: "List".into(),
                            seconds: timeout.as_secs_f64(),
                        }),
                        None,
                    )),
                    Ok(Err(status)) => Some((Err(Error::from(status)), None)),
                    Ok(Ok(None)) => None,
                    Ok(Ok(Some(resp))) => Some((
                        Ok(resp.objects.into_iter().map(Object::from_proto).collect()),
                        Some(Ok(streaming)),
                    )),
                }
            })
        })
        .flatten()
        .boxed()
    }

    /// The informer's events: the current objects as [`Event::Added`] (`initial`), then
    /// [`Event::Synced`], then every change, each key's changes in order. The stream has no
    /// deadline and reconnects by itself (see the module docs); drop it to stop.
    pub fn watch(&self, params: WatchParams) -> Watch {
        let (tx, rx) = mpsc::channel(4);
        let mut request = params.request.clone();
        request.informer_id = self.info.id.clone();
        let checked = count(
            "WatchParams.max_batch_bytes",
            request.max_batch_bytes,
            MAX_BATCH_BYTES,
        );
        let informer = self.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = checked {
                let _ = tx.send(Err(e)).await;
                return;
            }
            informer.pump(request, params, tx).await;
        });
        Watch {
            rx,
            pending: Default::default(),
            task: task.abort_handle(),
        }
    }

    async fn pump(
        self,
        request: WatchRequest,
        params: WatchParams,
        tx: mpsc::Sender<Result<Vec<Event>>>,
    ) {
        let mut backoff = params.backoff.clone();
        let mut opened_before = false;
        // Events delivered since the last Reconnecting: one Reconnecting per outage, however
        // many attempts it takes.
        let mut delivered = true;
        loop {
            let error = match self
                .stream_once(&request, opened_before, &tx, &mut backoff, &mut delivered)
                .await
            {
                Ok(()) => return, // receiver gone
                Err(e) => e,
            };
            // A deleted informer stays deleted: the watch ends instead of re-ensuring it.
            let deleted = error.reason() == Some(ErrorReason::InformerDeleted);
            let transient = (error.is_transient() && !deleted)
                || (opened_before && error.reason() == Some(ErrorReason::InformerNotFound));
            if !params.reconnect || !transient {
                let _ = tx.send(Err(error)).await;
                return;
            }
            tracing::debug!(informer = %self.info.id, %error, "watch broke; reconnecting");
            if delivered {
                delivered = false;
                let event = Event::Reconnecting {
                    error: std::sync::Arc::new(error),
                };
                if tx.send(Ok(vec![event])).await.is_err() {
                    return;
                }
            }
            opened_before = true;
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// One stream: Ok when the receiver went away, Err when the stream broke.
    async fn stream_once(
        &self,
        request: &WatchRequest,
        reensure: bool,
        tx: &mpsc::Sender<Result<Vec<Event>>>,
        backoff: &mut Backoff,
        delivered: &mut bool,
    ) -> Result<()> {
        if reensure {
            // The daemon may have restarted and lost the informer: the id is stable for the spec.
            let mut rpc = self.client.informers_raw();
            let info = self
                .client
                .unary(
                    "EnsureInformer",
                    None,
                    EnsureInformerRequest {
                        spec: Some(self.spec.clone()),
                    },
                    |r| rpc.ensure_informer(r),
                )
                .await?;
            if info.id != self.info.id {
                return Err(Error::Protocol(format!(
                    "informer {} came back as {}",
                    self.info.id, info.id
                )));
            }
        }
        let mut rpc = self.client.informers_raw();
        let mut streaming = rpc.watch(request.clone()).await?.into_inner();
        loop {
            let resp = match streaming.message().await? {
                Some(r) => r,
                None => {
                    return Err(Error::Api(Box::new(crate::error::Status {
                        code: tonic::Code::Unavailable,
                        message: "the daemon ended the watch".into(),
                        reason: String::new(),
                        metadata: Default::default(),
                        field: None,
                    })));
                }
            };
            backoff.reset();
            *delivered = true;
            let events: Result<Vec<Event>> =
                resp.events.into_iter().map(Event::from_proto).collect();
            if tx.send(events).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Stops the informer in the daemon (for every user of it) and frees its cache.
    pub async fn delete(&self) -> Result<()> {
        let mut rpc = self.client.informers_raw();
        self.client
            .unary(
                "DeleteInformer",
                None,
                DeleteInformerRequest {
                    informer_id: self.info.id.clone(),
                },
                |r| rpc.delete_informer(r),
            )
            .await?;
        self.client.forget_informer(&self.info.id);
        Ok(())
    }
}

/// The event stream of [`Informer::watch`]: a `Stream` of events (batches flattened). Ends
/// after an error that reconnecting cannot mend; dropping it stops the watch.
pub struct Watch {
    rx: mpsc::Receiver<Result<Vec<Event>>>,
    pending: std::collections::VecDeque<Event>,
    task: tokio::task::AbortHandle,
}

impl Watch {
    /// The next batch of events as the daemon sent them (one response), for consumers that
    /// apply changes in bulk.
    pub async fn next_batch(&mut self) -> Option<Result<Vec<Event>>> {
        if !self.pending.is_empty() {
            return Some(Ok(self.pending.drain(..).collect()));
        }
        self.rx.recv().await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for Watch {
    type Item = Result<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(e)));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(batch))) => self.pending.extend(batch),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
