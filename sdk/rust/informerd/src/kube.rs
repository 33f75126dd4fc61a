//! Writes through your own `kube::Client` (the `kube` feature): a finalizer helper and a status
//! patch helper. informerd serves reads (informers and queues); writes go to the API server with
//! the user's client, as in kube-rs and controller-runtime.
//!
//! With this feature every `kube::Resource` with a static type (k8s-openapi types and
//! `#[derive(CustomResource)]` types) is a [`crate::Resource`], so it works with
//! [`crate::Controller::new`], [`crate::Controller::owns`] and [`crate::Controller::watches`]:
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use informerd::kube::{Event, FinalizerError, StatusPatch, finalizer, patch_status};
//! use informerd::{Action, Context, Controller};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::{Api, ResourceExt};
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error(transparent)]
//! struct Error(#[from] informerd::Error);
//!
//! async fn reconcile(cm: Arc<ConfigMap>, ctx: Context<kube::Client>) -> Result<Action, FinalizerError<Error>> {
//!     let api: Api<ConfigMap> = Api::namespaced(ctx.data().as_ref().clone(), ctx.namespace());
//!     finalizer(&api, "example.com/cleanup", cm, |event| async move {
//!         match event {
//!             Event::Apply(cm) => tracing::info!("{} is live", cm.name_any()),
//!             Event::Cleanup(cm) => tracing::info!("{} is going", cm.name_any()),
//!         }
//!         Ok::<_, Error>(Action::await_change())
//!     })
//!     .await
//! }
//!
//! # async fn f(client: informerd::Client, kube: kube::Client) -> informerd::Result<()> {
//! Controller::<ConfigMap>::new(client, "cm-cleanup")
//!     .shutdown_on_signal()
//!     .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(5)), Arc::new(kube))
//!     .await
//! # }
//! ```
//!
//! Every write has a deadline ([`DEFAULT_TIMEOUT`], or [`StatusPatch::timeout`]); failures are
//! [`crate::Error::Kube`] (the API server's answer) or [`crate::Error::Timeout`].
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Patch, PatchParams};
use ::kube::{Api, Resource as KubeResource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::controller::Action;
use crate::error::{Error, Result};

/// The deadline of each write these helpers make.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl<K> crate::Resource for K
where
    K: KubeResource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
{
    fn api_version() -> String {
        K::api_version(&()).into_owned()
    }

    fn kind() -> String {
        K::kind(&()).into_owned()
    }
}

/// Whether a write failed because the object changed since it was read: HTTP 409 (a stale
/// resourceVersion, a server-side apply conflict without force) or 422 from a JSON patch whose
/// `test` failed. Retry with a fresh object (return the error from the reconcile: the key is
/// retried, rate-limited).
pub fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Kube(::kube::Error::Api(s)) if s.code == 409 || s.code == 422)
}

/// Whether the API server answered 404 (no such object, or the kind is not served).
pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Kube(::kube::Error::Api(s)) if s.code == 404)
}

async fn with_deadline<T>(
    what: impl FnOnce() -> String,
    timeout: Duration,
    call: impl Future<Output = ::kube::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r.map_err(Error::Kube),
        Err(_) => Err(Error::Timeout {
            what: what(),
            seconds: timeout.as_secs_f64(),
        }),
    }
}

/// What [`finalizer`] asks the reconcile to do.
#[derive(Debug)]
pub enum Event<K> {
    /// The object is live and carries the finalizer: make the world match it. Must be
    /// idempotent, as any reconcile.
    Apply(Arc<K>),
    /// The object is being deleted and still carries the finalizer: release what it holds. The
    /// finalizer is removed once this returns `Ok` (and the API server then deletes the object);
    /// an error leaves it in place, and the key is retried.
    Cleanup(Arc<K>),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E>
where
    E: std::error::Error + 'static,
{
    /// The reconcile's [`Event::Apply`] failed.
    #[error("failed to apply object: {0}")]
    ApplyFailed(#[source] E),
    /// The reconcile's [`Event::Cleanup`] failed; the finalizer stays.
    #[error("failed to clean up object: {0}")]
    CleanupFailed(#[source] E),
    /// The finalizer could not be added ([`FinalizerError::is_conflict`] when the object changed
    /// since it was read).
    #[error("failed to add finalizer: {0}")]
    AddFinalizer(#[source] Error),
    /// The finalizer could not be removed ([`FinalizerError::is_conflict`] when the object
    /// changed since it was read).
    #[error("failed to remove finalizer: {0}")]
    RemoveFinalizer(#[source] Error),
    /// The object has no `metadata.name`.
    #[error("object has no name")]
    UnnamedObject,
    /// The finalizer's name is not a qualified name like `example.com/cleanup`.
    #[error("invalid finalizer name {0:?}: want a domain-qualified name like example.com/cleanup")]
    InvalidFinalizer(String),
}

impl<E: std::error::Error + 'static> FinalizerError<E> {
    /// Whether adding or removing the finalizer lost a race with another writer (see
    /// [`is_conflict`]): retrying with a fresh object is the cure.
    pub fn is_conflict(&self) -> bool {
        match self {
            FinalizerError::AddFinalizer(e) | FinalizerError::RemoveFinalizer(e) => is_conflict(e),
            _ => false,
        }
    }
}

fn dns_label_chars(s: &str, extra: &[char]) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
        && s.chars().all(|c| alnum(c) || extra.contains(&c))
}

/// Whether `name` is a finalizer name Kubernetes accepts and recommends: `prefix/name` with a
/// DNS subdomain prefix (at most 253 characters) and a name of at most 63 characters.
fn valid_finalizer(name: &str) -> bool {
    let Some((prefix, rest)) = name.split_once('/') else {
        return false;
    };
    prefix.len() <= 253
        && rest.len() <= 63
        && prefix == prefix.to_ascii_lowercase()
        && prefix.split('.').all(|l| dns_label_chars(l, &['-']))
        && dns_label_chars(rest, &['-', '_', '.'])
}

/// Runs `reconcile` with the finalizer `finalizer_name` handled around it, as kube-runtime's
/// `finalizer` does:
///
/// - a live object without the finalizer: the finalizer is added with a JSON patch that first
///   `test`s the current finalizer list, so that two writers cannot both add it (nor one
///   clobber another's); then `reconcile(Event::Apply)` runs on the object the patch returned.
///   (kube-runtime returns after adding and waits for the update event; with informerd's
///   `Predicate::generation_changed()` that event is filtered out, since metadata writes do not
///   change the generation, so the apply runs at once.)
/// - a live object with it: `reconcile(Event::Apply)`.
/// - an object being deleted (`deletionTimestamp` set) with it: `reconcile(Event::Cleanup)`,
///   then the finalizer is removed with a JSON patch that `test`s it is still at the index it
///   was read at. If the object is gone by then, that is success.
/// - an object being deleted without it: nothing to do, `Action::await_change()`.
///
/// `api` must address the object's namespace (`Api::namespaced(client, ctx.namespace())`), or be
/// `Api::all` for cluster-scoped kinds. Returns the reconcile's [`Action`]. Each write has a
/// deadline of [`DEFAULT_TIMEOUT`].
pub async fn finalizer<K, F, Fut, E>(
    api: &Api<K>,
    finalizer_name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> std::result::Result<Action, FinalizerError<E>>
where
    K: KubeResource + Clone + DeserializeOwned + Serialize + Debug,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = std::result::Result<Action, E>>,
    E: std::error::Error + 'static,
{
    if !valid_finalizer(finalizer_name) {
        return Err(FinalizerError::InvalidFinalizer(finalizer_name.to_string()));
    }
    let meta = obj.meta();
    let name = meta.name.clone().ok_or(FinalizerError::UnnamedObject)?;
    let finalizers = meta.finalizers.as_deref().unwrap_or_default();
    let index = finalizers.iter().position(|f| f == finalizer_name);
    let deleting = meta.deletion_timestamp.is_some();
    let what = |verb: &str| format!("{verb} finalizer {finalizer_name} of {name}");
    match (index, deleting) {
        (Some(_), false) => reconcile(Event::Apply(obj))
            .await
            .map_err(FinalizerError::ApplyFailed),
        (Some(i), true) => {
            let action = reconcile(Event::Cleanup(obj))
                .await
                .map_err(FinalizerError::CleanupFailed)?;
            let path = format!("/metadata/finalizers/{i}");
            let ops = json!([
                {"op": "test", "path": path, "value": finalizer_name},
                {"op": "remove", "path": path},
            ]);
            match json_patch(api, &name, ops, || what("remove")).await {
                Ok(_) => Ok(action),
                Err(e) if is_not_found(&e) => Ok(action), // deleted already
                Err(e) => Err(FinalizerError::RemoveFinalizer(e)),
            }
        }
        (None, false) => {
            let ops = if finalizers.is_empty() {
                // A missing list tests equal to null: this fails if anyone added one since.
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": [finalizer_name]},
                ])
            } else {
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer_name},
                ])
            };
            let patched = json_patch(api, &name, ops, || what("add"))
                .await
                .map_err(FinalizerError::AddFinalizer)?;
            reconcile(Event::Apply(Arc::new(patched)))
                .await
                .map_err(FinalizerError::ApplyFailed)
        }
        (None, true) => Ok(Action::await_change()),
    }
}

async fn json_patch<K>(
    api: &Api<K>,
    name: &str,
    ops: Value,
    what: impl FnOnce() -> String,
) -> Result<K>
where
    K: Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::from_value(ops)
        .map_err(|e| Error::Protocol(format!("a JSON patch that does not parse: {e}")))?;
    with_deadline(
        what,
        DEFAULT_TIMEOUT,
        api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)),
    )
    .await
}

/// How [`patch_status`] writes: a JSON merge patch ([`StatusPatch::merge`], the default) or a
/// server-side apply ([`StatusPatch::apply`]).
#[derive(Clone, Debug)]
pub struct StatusPatch {
    apply: bool,
    force: bool,
    field_manager: Option<String>,
    resource_version: Option<String>,
    timeout: Duration,
}

impl Default for StatusPatch {
    fn default() -> Self {
        StatusPatch::merge()
    }
}

impl StatusPatch {
    /// A JSON merge patch of `{"status": ...}`: keys set to `null` are removed, lists are
    /// replaced whole, fields not given are kept.
    pub fn merge() -> Self {
        StatusPatch {
            apply: false,
            force: false,
            field_manager: None,
            resource_version: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// A server-side apply of `{"apiVersion", "kind", "status": ...}` as `field_manager`: the
    /// status fields this manager applied before and leaves out now are removed.
    pub fn apply(field_manager: impl Into<String>) -> Self {
        StatusPatch {
            apply: true,
            field_manager: Some(field_manager.into()),
            ..StatusPatch::merge()
        }
    }

    /// For [`StatusPatch::apply`]: take fields other managers own (what controllers normally
    /// do); without it such a conflict fails with HTTP 409.
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// The field manager of a merge patch (an apply names one always).
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// For [`StatusPatch::merge`]: write only if the object is still at this resourceVersion
    /// (else HTTP 409, see [`is_conflict`]).
    pub fn resource_version(mut self, version: impl Into<String>) -> Self {
        self.resource_version = Some(version.into());
        self
    }

    /// The write's deadline (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Writes `status` to the `/status` subresource of the object `name` and returns the object
/// (the resource needs a status subresource, as every CRD that declares `subresources.status`
/// and the built-in kinds with a status have). `status` must serialize to a JSON object.
///
/// ```no_run
/// # async fn f(api: kube::Api<k8s_openapi::api::apps::v1::Deployment>) -> informerd::Result<()> {
/// use informerd::kube::{StatusPatch, patch_status};
/// patch_status(&api, "web", serde_json::json!({"observedGeneration": 3}), &StatusPatch::merge()).await?;
/// patch_status(&api, "web", serde_json::json!({"observedGeneration": 3}),
///              &StatusPatch::apply("my-controller").force()).await?;
/// # Ok(())
/// # }
/// ```
pub async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    status: impl Serialize,
    how: &StatusPatch,
) -> Result<K>
where
    K: KubeResource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    if name.is_empty() {
        return Err(Error::invalid("patch_status.name", "empty"));
    }
    let status = serde_json::to_value(status)
        .map_err(|e| Error::invalid("patch_status.status", e.to_string()))?;
    if !status.is_object() {
        return Err(Error::invalid(
            "patch_status.status",
            format!("must be a JSON object, got {status}"),
        ));
    }
    if how.timeout.is_zero() {
        return Err(Error::invalid("StatusPatch.timeout", "zero"));
    }
    let mut params = PatchParams {
        field_manager: how.field_manager.clone(),
        ..PatchParams::default()
    };
    let what = || format!("patch status of {name}");
    if how.apply {
        if how.field_manager.as_deref().unwrap_or("").is_empty() {
            return Err(Error::invalid(
                "StatusPatch.field_manager",
                "empty (a server-side apply names its field manager)",
            ));
        }
        if how.resource_version.is_some() {
            return Err(Error::invalid(
                "StatusPatch.resource_version",
                "only for merge patches (an apply conflicts by field ownership)",
            ));
        }
        params.force = how.force;
        let dt = K::DynamicType::default();
        let body = json!({
            "apiVersion": K::api_version(&dt),
            "kind": K::kind(&dt),
            "status": status,
        });
        with_deadline(
            what,
            how.timeout,
            api.patch_status(name, &params, &Patch::Apply(body)),
        )
        .await
    } else {
        if how.force {
            return Err(Error::invalid(
                "StatusPatch.force",
                "only for server-side apply (StatusPatch::apply)",
            ));
        }
        let mut body = json!({ "status": status });
        if let Some(rv) = &how.resource_version {
            body["metadata"] = json!({ "resourceVersion": rv });
        }
        with_deadline(
            what,
            how.timeout,
            api.patch_status(name, &params, &Patch::Merge(body)),
        )
        .await
    }
}

/// Sets the condition `new.type_` in `conditions`, as `meta.SetStatusCondition` does: a condition
/// of that type is replaced, keeping its `lastTransitionTime` when the status did not change;
/// otherwise `new` is appended. Returns whether anything changed.
///
/// ```
/// use informerd::kube::set_condition;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
/// let mut conditions = Vec::new();
/// set_condition(&mut conditions, Condition {
///     type_: "Ready".into(), status: "True".into(), reason: "Provisioned".into(),
///     message: String::new(), observed_generation: Some(1),
///     last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
/// });
/// assert_eq!(conditions[0].reason, "Provisioned");
/// ```
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            let changed = *old != new;
            *old = new;
            changed
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};

    #[test]
    fn k8s_openapi_types_are_resources() {
        assert_eq!(<ConfigMap as crate::Resource>::api_version(), "v1");
        assert_eq!(<ConfigMap as crate::Resource>::kind(), "ConfigMap");
        assert_eq!(<Deployment as crate::Resource>::api_version(), "apps/v1");
    }

    #[test]
    fn finalizer_names_are_qualified() {
        assert!(valid_finalizer("example.com/cleanup"));
        assert!(valid_finalizer("a.b-c.io/x_y.z-1"));
        for bad in [
            "",
            "cleanup",
            "/cleanup",
            "example.com/",
            "Example.com/x",
            "-a.com/x",
            "a..com/x",
            "a.com/-x",
            "a.com/x/y",
        ] {
            assert!(!valid_finalizer(bad), "{bad:?}");
        }
        assert!(!valid_finalizer(&format!("a.com/{}", "x".repeat(64))));
    }

    #[tokio::test]
    async fn bad_input_fails_before_any_request() {
        // An address nothing listens on: a request would fail differently.
        let config = ::kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = ::kube::Client::try_from(config).unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client, "ns");
        let e = patch_status(&api, "", json!({}), &StatusPatch::merge())
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("patch_status.name"));
        let e = patch_status(&api, "a", json!([1]), &StatusPatch::merge())
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("patch_status.status"));
        let e = patch_status(&api, "a", json!({}), &StatusPatch::apply(""))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("StatusPatch.field_manager"));
        let e = patch_status(&api, "a", json!({}), &StatusPatch::merge().force())
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("StatusPatch.force"));

        let cm = Arc::new(ConfigMap::default());
        let never = |_: Event<ConfigMap>| async { Ok::<_, std::io::Error>(Action::await_change()) };
        let e = finalizer(&api, "cleanup", cm.clone(), never)
            .await
            .unwrap_err();
        assert!(matches!(e, FinalizerError::InvalidFinalizer(_)), "{e}");
        let e = finalizer(&api, "example.com/cleanup", cm, never)
            .await
            .unwrap_err();
        assert!(matches!(e, FinalizerError::UnnamedObject), "{e}");
    }

    #[test]
    fn set_condition_keeps_the_transition_time_while_the_status_holds() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let ready = |status: &str, reason: &str, t: i64| Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(t),
        };
        let mut cs = vec![ready("False", "Pending", 1)];
        assert!(set_condition(&mut cs, ready("False", "Waiting", 2)));
        assert_eq!(
            (cs[0].reason.as_str(), &cs[0].last_transition_time),
            ("Waiting", &at(1))
        );
        assert!(!set_condition(&mut cs, ready("False", "Waiting", 3)));
        assert!(set_condition(&mut cs, ready("True", "Done", 4)));
        assert_eq!(cs[0].last_transition_time, at(4));
        let mut other = ready("True", "x", 5);
        other.type_ = "Synced".into();
        assert!(set_condition(&mut cs, other));
        assert_eq!(cs.len(), 2);
    }
}
