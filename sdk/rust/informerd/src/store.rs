//! A local, indexed cache of one informer, mirrored from its Watch stream: hot reads need no
//! round trip (kube-runtime's reflector `Store`, client-go's indexer).
//!
//! ```no_run
//! # async fn f(client: informerd::Client) -> informerd::Result<()> {
//! use std::time::Duration;
//! use k8s_openapi::api::core::v1::Pod;
//! use informerd::{InformerSpec, Store};
//! let pods = client.informers().ensure(InformerSpec::new("v1", "Pod").namespace("demo")).await?;
//! let store = Store::<Pod>::builder(&pods)
//!     .index("by-node", |pod: &Pod| {
//!         pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
//!     })
//!     .start()?;
//! store.wait_until_ready(Duration::from_secs(60)).await?;
//! let web = store.get("demo/web-0");
//! let on_node = store.by_index("by-node", "node-1")?;
//! # Ok(()) }
//! ```
//!
//! **Consistency.** The Store applies each batch of events the daemon sends under one write
//! lock, in order. After a `Resnapshot` (the Store fell behind) the net change of each key
//! follows and the Store ends at the daemon's state. After a reconnect (daemon restart, network
//! failure) the fresh initial objects replace the contents: keys not among them are removed when
//! the new snapshot's `Synced` arrives. Reads between the break and that `Synced` see the last
//! known state.
//!
//! **Decoding.** Each object is decoded into `K` once, when its event arrives, and shared as an
//! `Arc<K>`. An object that does not decode is not in the Store (a previous version of it is
//! removed): the failure is logged as a `tracing` warning and counted in
//! [`Store::decode_errors`]; the Store goes on.
//!
//! **Lifetime.** The Store is cheap to clone; clones share the cache. Dropping the last clone
//! stops the watch. A watch that ends with an error (the informer was deleted, an error that
//! reconnecting cannot mend) keeps the contents readable and reports the error through
//! [`Store::error`] and [`Store::wait_until_ready`].
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::informers::{Event, Informer, WatchParams};
use crate::object::Object;

/// The index every Store keeps: keys by namespace (`""` for cluster-scoped objects).
pub const NAMESPACE_INDEX: &str = "namespace";

type IndexFn<K> = Box<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// One index: value -> keys, and key -> the values it is under (to unindex).
#[derive(Default)]
struct Index {
    keys_by_value: HashMap<String, BTreeSet<String>>,
    values_by_key: HashMap<String, Vec<String>>,
}

impl Index {
    fn put(&mut self, key: &str, mut values: Vec<String>) {
        values.sort();
        values.dedup();
        if self.values_by_key.get(key) == Some(&values) {
            return;
        }
        self.remove(key);
        for value in &values {
            self.keys_by_value
                .entry(value.clone())
                .or_default()
                .insert(key.to_string());
        }
        self.values_by_key.insert(key.to_string(), values);
    }

    fn remove(&mut self, key: &str) {
        for value in self.values_by_key.remove(key).unwrap_or_default() {
            if let Some(keys) = self.keys_by_value.get_mut(&value) {
                keys.remove(key);
                if keys.is_empty() {
                    self.keys_by_value.remove(&value);
                }
            }
        }
    }
}

struct State<K> {
    items: BTreeMap<String, Arc<K>>,
    indexes: HashMap<String, Index>,
    /// Between `Reconnecting` and the next `Synced`: the keys the fresh snapshot brought.
    relisted: Option<HashSet<String>>,
}

/// Where the Store is: waiting for its first snapshot, ready, or ended by an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Pending,
    Ready,
    Ended,
}

struct Shared<K> {
    informer_id: String,
    state: RwLock<State<K>>,
    functions: Vec<(String, IndexFn<K>)>,
    phase: watch::Sender<Phase>,
    ready_once: std::sync::atomic::AtomicBool,
    error: RwLock<Option<Arc<Error>>>,
    decode_errors: AtomicU64,
    reconnects: AtomicU64,
    resnapshots: AtomicU64,
}

/// Stops the Store's task when the last clone goes.
struct Task(tokio::task::AbortHandle);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A local mirror of one informer, objects decoded as `K` (see the module docs).
pub struct Store<K> {
    shared: Arc<Shared<K>>,
    _task: Arc<Task>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            shared: self.shared.clone(),
            _task: self._task.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("informer", &self.shared.informer_id)
            .field("objects", &self.read().items.len())
            .field("ready", &self.is_ready())
            .finish()
    }
}

/// Builds a [`Store`]: indexes and watch parameters, then [`StoreBuilder::start`].
pub struct StoreBuilder<K> {
    informer: Informer,
    functions: Vec<(String, IndexFn<K>)>,
    params: WatchParams,
}

impl<K: DeserializeOwned + Send + Sync + 'static> StoreBuilder<K> {
    /// Adds an index: `function` maps an object to the values it is found under in
    /// [`Store::by_index`] (client-go's `IndexFunc`). [`NAMESPACE_INDEX`] is always there.
    pub fn index<F>(mut self, name: impl Into<String>, function: F) -> Self
    where
        F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
    {
        self.functions.push((name.into(), Box::new(function)));
        self
    }

    /// The watch's parameters (buffer, batches, backoff); reconnecting stays on.
    pub fn params(mut self, params: WatchParams) -> Self {
        self.params = params;
        self
    }

    /// Starts mirroring (returns at once; see [`Store::wait_until_ready`]). Must be called
    /// within a tokio runtime. Fails naming the index when two share a name or one is named
    /// [`NAMESPACE_INDEX`] or is empty.
    pub fn start(self) -> Result<Store<K>> {
        let mut indexes = HashMap::new();
        indexes.insert(NAMESPACE_INDEX.to_string(), Index::default());
        for (name, _) in &self.functions {
            let field = || format!("Store.index({name:?})");
            if name.is_empty() {
                return Err(Error::invalid(field(), "an index needs a name"));
            }
            if name == NAMESPACE_INDEX {
                return Err(Error::invalid(field(), "the Store keeps this index itself"));
            }
            if indexes.insert(name.clone(), Index::default()).is_some() {
                return Err(Error::invalid(field(), "given twice"));
            }
        }
        let shared = Arc::new(Shared::new(
            self.informer.id().to_string(),
            indexes,
            self.functions,
        ));
        let watch = self.informer.watch(self.params);
        let task = tokio::spawn(run(shared.clone(), watch));
        Ok(Store {
            shared,
            _task: Arc::new(Task(task.abort_handle())),
        })
    }
}

/// What a decoded event does to the Store.
enum Change<K> {
    Put {
        key: String,
        namespace: String,
        object: Arc<K>,
        initial: bool,
    },
    /// The object's new state did not decode: it is not a `K` any more.
    Undecodable {
        key: String,
        initial: bool,
    },
    Remove {
        key: String,
    },
    Synced,
    Resnapshot,
    Reconnecting,
}

impl<K: DeserializeOwned> Change<K> {
    fn of(event: Event, shared: &Shared<K>) -> Change<K> {
        let put = |object: Object, initial: bool| match object.decode::<K>() {
            Ok(decoded) => Change::Put {
                key: object.key().to_string(),
                namespace: object.namespace().to_string(),
                object: Arc::new(decoded),
                initial,
            },
            Err(error) => {
                shared.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(informer = %shared.informer_id, %error, "store: skipping an object that does not decode");
                Change::Undecodable {
                    key: object.key().to_string(),
                    initial,
                }
            }
        };
        match event {
            Event::Added { object, initial } => put(object, initial),
            Event::Updated { object, .. } => put(object, false),
            Event::Deleted { object, .. } => Change::Remove {
                key: object.key().to_string(),
            },
            Event::Synced => Change::Synced,
            Event::Resnapshot { .. } => Change::Resnapshot,
            Event::Reconnecting { .. } => Change::Reconnecting,
        }
    }
}

async fn run<K: DeserializeOwned + Send + Sync + 'static>(
    shared: Arc<Shared<K>>,
    mut watch: crate::informers::Watch,
) {
    let error = loop {
        match watch.next_batch().await {
            Some(Ok(events)) => shared.feed(events),
            Some(Err(e)) => break e,
            None => break Error::Stopped,
        }
    };
    tracing::warn!(informer = %shared.informer_id, %error, "store: the watch ended");
    *shared.error.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(error));
    shared.phase.send_replace(Phase::Ended);
}

impl<K: DeserializeOwned> Shared<K> {
    fn new(
        informer_id: String,
        indexes: HashMap<String, Index>,
        functions: Vec<(String, IndexFn<K>)>,
    ) -> Self {
        Shared {
            informer_id,
            state: RwLock::new(State {
                items: BTreeMap::new(),
                indexes,
                relisted: None,
            }),
            functions,
            phase: watch::channel(Phase::Pending).0,
            ready_once: Default::default(),
            error: RwLock::new(None),
            decode_errors: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            resnapshots: AtomicU64::new(0),
        }
    }

    /// Applies one batch of events: decoded and indexed outside the lock, applied under it at
    /// once.
    fn feed(&self, events: Vec<Event>) {
        let changes: Vec<Change<K>> = events.into_iter().map(|e| Change::of(e, self)).collect();
        let values: Vec<Vec<Vec<String>>> = changes
            .iter()
            .map(|c| match c {
                Change::Put { object, .. } => {
                    self.functions.iter().map(|(_, f)| f(object)).collect()
                }
                _ => Vec::new(),
            })
            .collect();
        self.apply(changes, values);
    }

    fn apply(&self, changes: Vec<Change<K>>, values: Vec<Vec<Vec<String>>>) {
        let mut synced = false;
        {
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            for (change, values) in changes.into_iter().zip(values) {
                match change {
                    Change::Put {
                        key,
                        namespace,
                        object,
                        initial,
                    } => {
                        state.note_initial(&key, initial);
                        state.put(&self.functions, key, namespace, object, values);
                    }
                    Change::Undecodable { key, initial } => {
                        state.note_initial(&key, initial);
                        state.remove(&key);
                    }
                    Change::Remove { key } => state.remove(&key),
                    Change::Synced => {
                        if let Some(relisted) = state.relisted.take() {
                            let gone: Vec<String> = state
                                .items
                                .keys()
                                .filter(|k| !relisted.contains(*k))
                                .cloned()
                                .collect();
                            for key in gone {
                                state.remove(&key);
                            }
                        }
                        synced = true;
                    }
                    Change::Resnapshot => {
                        self.resnapshots.fetch_add(1, Ordering::Relaxed);
                    }
                    Change::Reconnecting => {
                        self.reconnects.fetch_add(1, Ordering::Relaxed);
                        state.relisted = Some(HashSet::new());
                    }
                }
            }
        }
        if synced {
            self.ready_once.store(true, Ordering::Release);
            self.phase.send_replace(Phase::Ready);
        }
    }
}

impl<K> State<K> {
    /// Records a key of a snapshot taken after a reconnect.
    fn note_initial(&mut self, key: &str, initial: bool) {
        if let (true, Some(relisted)) = (initial, self.relisted.as_mut()) {
            relisted.insert(key.to_string());
        }
    }

    fn put(
        &mut self,
        functions: &[(String, IndexFn<K>)],
        key: String,
        namespace: String,
        object: Arc<K>,
        values: Vec<Vec<String>>,
    ) {
        if let Some(index) = self.indexes.get_mut(NAMESPACE_INDEX) {
            index.put(&key, vec![namespace]);
        }
        for ((name, _), values) in functions.iter().zip(values) {
            if let Some(index) = self.indexes.get_mut(name) {
                index.put(&key, values);
            }
        }
        self.items.insert(key, object);
    }

    fn remove(&mut self, key: &str) {
        if self.items.remove(key).is_some() {
            for index in self.indexes.values_mut() {
                index.remove(key);
            }
        }
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Store<K> {
    /// A builder of a Store mirroring `informer`.
    pub fn builder(informer: &Informer) -> StoreBuilder<K> {
        StoreBuilder {
            informer: informer.clone(),
            functions: Vec::new(),
            params: WatchParams::default(),
        }
    }

    /// A Store of `informer` without extra indexes, started.
    pub fn start(informer: &Informer) -> Result<Store<K>> {
        Store::builder(informer).start()
    }
}

impl<K> Store<K> {
    fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        self.shared.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The informer's id.
    pub fn informer_id(&self) -> &str {
        &self.shared.informer_id
    }

    /// The object with `key` (`namespace/name`, or `name` for cluster-scoped objects).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// Whether an object with `key` is in the Store.
    pub fn contains(&self, key: &str) -> bool {
        self.read().items.contains_key(key)
    }

    /// Every object, sorted by key.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.read().items.keys().cloned().collect()
    }

    /// How many objects the Store holds.
    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    /// Whether the Store holds no object.
    pub fn is_empty(&self) -> bool {
        self.read().items.is_empty()
    }

    /// The objects (sorted by key) indexed under `value` in `index` (client-go's `ByIndex`).
    /// An unknown index is an error naming it.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>> {
        let state = self.read();
        let keys = Self::index_of(&state, index)?.keys_by_value.get(value);
        Ok(keys
            .into_iter()
            .flatten()
            .filter_map(|k| state.items.get(k).cloned())
            .collect())
    }

    /// The keys (sorted) indexed under `value` in `index` (client-go's `IndexKeys`).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>> {
        let state = self.read();
        let keys = Self::index_of(&state, index)?.keys_by_value.get(value);
        Ok(keys.into_iter().flatten().cloned().collect())
    }

    /// Every value (sorted) some object has in `index` (client-go's `ListIndexFuncValues`).
    pub fn index_values(&self, index: &str) -> Result<Vec<String>> {
        let state = self.read();
        let mut values: Vec<String> = Self::index_of(&state, index)?
            .keys_by_value
            .keys()
            .cloned()
            .collect();
        values.sort();
        Ok(values)
    }

    fn index_of<'a>(state: &'a State<K>, name: &str) -> Result<&'a Index> {
        state.indexes.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = state.indexes.keys().map(String::as_str).collect();
            known.sort();
            Error::invalid(
                "index",
                format!("{name:?} is not an index of this Store (it has {known:?})"),
            )
        })
    }

    /// Whether the first snapshot is in the Store (it stays so across reconnects).
    pub fn is_ready(&self) -> bool {
        self.shared.ready_once.load(Ordering::Acquire)
    }

    /// Returns once the Store holds the informer's objects (at once if it did before). Fails
    /// with the error that ended the watch, or with [`Error::Timeout`] after `timeout`.
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<()> {
        let mut phase = self.shared.phase.subscribe();
        let outcome = tokio::time::timeout(timeout, phase.wait_for(|p| *p != Phase::Pending)).await;
        if self.is_ready() {
            return Ok(());
        }
        match outcome {
            Err(_) => Err(Error::Timeout {
                what: format!(
                    "the Store of informer {} to be ready",
                    self.shared.informer_id
                ),
                seconds: timeout.as_secs_f64(),
            }),
            // Ended (or, impossibly, the sender gone): the watch's error.
            Ok(_) => Err(self.error().map_or(Error::Stopped, |e| duplicate(&e))),
        }
    }

    /// What ended the Store's watch, or `None` while it runs.
    pub fn error(&self) -> Option<Arc<Error>> {
        self.shared
            .error
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many objects did not decode as `K` (each skipped with a warning).
    pub fn decode_errors(&self) -> u64 {
        self.shared.decode_errors.load(Ordering::Relaxed)
    }

    /// How many times the watch broke and the Store took a fresh snapshot.
    pub fn reconnects(&self) -> u64 {
        self.shared.reconnects.load(Ordering::Relaxed)
    }

    /// How many times the Store fell behind and the daemon re-snapshotted it.
    pub fn resnapshots(&self) -> u64 {
        self.shared.resnapshots.load(Ordering::Relaxed)
    }
}

/// An owned copy of a shared error, for [`Store::wait_until_ready`].
fn duplicate(e: &Error) -> Error {
    match e {
        Error::Api(status) => Error::Api(status.clone()),
        Error::InvalidArgument { field, problem } => Error::invalid(field.clone(), problem.clone()),
        Error::Connect { target, problem } => Error::Connect {
            target: target.clone(),
            problem: problem.clone(),
        },
        Error::Timeout { what, seconds } => Error::Timeout {
            what: what.clone(),
            seconds: *seconds,
        },
        Error::Stopped => Error::Stopped,
        other => Error::Protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use informerd_api::v1;

    fn object(key: &str, json: &str) -> Object {
        let (namespace, name) = crate::object::split_key(key);
        Object::from_proto(v1::Object {
            json: prost::bytes::Bytes::copy_from_slice(json.as_bytes()),
            metadata: Some(v1::ObjectMeta {
                key: key.into(),
                namespace: namespace.into(),
                name: name.into(),
                ..Default::default()
            }),
        })
    }

    fn added(key: &str, json: &str, initial: bool) -> Event {
        Event::Added {
            object: object(key, json),
            initial,
        }
    }

    type Shape = BTreeMap<String, String>;

    fn shared() -> Shared<Shape> {
        let mut indexes = HashMap::new();
        indexes.insert(NAMESPACE_INDEX.to_string(), Index::default());
        indexes.insert("by-v".to_string(), Index::default());
        let by_v: IndexFn<Shape> = Box::new(|m: &Shape| m.get("v").cloned().into_iter().collect());
        Shared::new("inf".into(), indexes, vec![("by-v".into(), by_v)])
    }

    fn keys(shared: &Shared<Shape>) -> Vec<String> {
        shared.state.read().unwrap().items.keys().cloned().collect()
    }

    fn index_keys(shared: &Shared<Shape>, index: &str, value: &str) -> Vec<String> {
        let state = shared.state.read().unwrap();
        state.indexes[index]
            .keys_by_value
            .get(value)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    #[test]
    fn a_snapshot_after_a_reconnect_replaces_the_contents_at_synced() {
        let s = shared();
        s.feed(vec![
            added("ns/a", r#"{"v":"1"}"#, true),
            added("ns/b", r#"{"v":"1"}"#, true),
        ]);
        assert!(!s.ready_once.load(Ordering::Acquire));
        s.feed(vec![Event::Synced, Event::Resnapshot { keys: 1 }]);
        assert!(s.ready_once.load(Ordering::Acquire));
        assert_eq!(*s.phase.borrow(), Phase::Ready);
        assert_eq!(index_keys(&s, "by-v", "1"), ["ns/a", "ns/b"]);
        assert_eq!(s.resnapshots.load(Ordering::Relaxed), 1);

        let broke = Event::Reconnecting {
            error: Arc::new(Error::Stopped),
        };
        s.feed(vec![
            broke.clone(),
            broke,
            added("ns/a", r#"{"v":"2"}"#, true),
            added("ns/c", "{}", true),
        ]);
        // Until Synced the last known state stays (b included).
        assert_eq!(keys(&s), ["ns/a", "ns/b", "ns/c"]);
        s.feed(vec![Event::Synced]);
        assert_eq!(keys(&s), ["ns/a", "ns/c"]);
        assert!(index_keys(&s, "by-v", "1").is_empty());
        assert_eq!(index_keys(&s, "by-v", "2"), ["ns/a"]);
        assert_eq!(index_keys(&s, NAMESPACE_INDEX, "ns"), ["ns/a", "ns/c"]);
        assert_eq!(s.reconnects.load(Ordering::Relaxed), 2);

        s.feed(vec![Event::Deleted {
            object: object("ns/a", "{}"),
            tombstone: false,
        }]);
        assert_eq!(keys(&s), ["ns/c"]);
        assert!(index_keys(&s, "by-v", "2").is_empty());
    }

    #[test]
    fn an_object_that_does_not_decode_is_skipped_and_counted() {
        let s = shared();
        s.feed(vec![
            added("ns/a", r#"{"v":"1"}"#, true),
            added("ns/bad", r#"{"v":1}"#, true),
            Event::Synced,
        ]);
        assert_eq!(keys(&s), ["ns/a"]);
        assert_eq!(s.decode_errors.load(Ordering::Relaxed), 1);
        // An update that stops decoding takes the previous version out, indexes too.
        s.feed(vec![Event::Updated {
            object: object("ns/a", "[]"),
            old: None,
        }]);
        assert!(keys(&s).is_empty());
        assert!(index_keys(&s, "by-v", "1").is_empty());
        assert_eq!(s.decode_errors.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn an_index_follows_changes_of_values() {
        let mut index = Index::default();
        index.put("ns/a", vec!["x".into(), "y".into(), "x".into()]);
        index.put("ns/b", vec!["x".into()]);
        assert_eq!(
            index.keys_by_value["x"].iter().collect::<Vec<_>>(),
            ["ns/a", "ns/b"]
        );
        assert_eq!(index.values_by_key["ns/a"], ["x", "y"]);
        index.put("ns/a", vec!["z".into()]);
        assert!(!index.keys_by_value.contains_key("y"));
        assert_eq!(
            index.keys_by_value["x"].iter().collect::<Vec<_>>(),
            ["ns/b"]
        );
        index.remove("ns/b");
        assert!(!index.keys_by_value.contains_key("x"));
        assert_eq!(index.keys_by_value.len(), 1);
    }
}
