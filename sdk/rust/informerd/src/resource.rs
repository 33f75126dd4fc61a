//! The resource types a [`crate::Controller`] reconciles and watches.

/// A Kubernetes resource type with a fixed apiVersion and kind, decoded from the daemon's JSON.
///
/// With the `kube` feature every `kube::Resource` whose dynamic type is `()` is one: the
/// k8s-openapi types (`k8s_openapi::api::core::v1::ConfigMap`, ...) and the types
/// `#[derive(kube::CustomResource)]` generates. Without it, implement it for your own types.
pub trait Resource: serde::de::DeserializeOwned + Send + Sync + 'static {
    /// e.g. `"v1"`, `"apps/v1"`.
    fn api_version() -> String;
    /// e.g. `"ConfigMap"`.
    fn kind() -> String;
}
