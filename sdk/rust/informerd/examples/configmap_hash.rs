//! Example: stamp Deployments with a hash of the ConfigMaps they mount, so that a changed
//! ConfigMap rolls exactly the Deployments that use it (the same controller as the Python SDK's
//! `examples/configmap_hash.py`: same annotation, same hash, so the two agree).
//!
//! The controller reconciles Deployments (with the generation predicate: status updates from the
//! Deployment controller do not wake it) and watches ConfigMaps through an index on the
//! Deployment informer: `configmaps` indexes each Deployment by the names of the ConfigMaps its
//! pod template mounts, and a ConfigMap event enqueues the Deployments whose index holds its
//! name. Reads come from informerd's caches; the one write is a server-side apply of the pod
//! template's annotation `informerd.io/configmap-hash` (a changed pod template makes the
//! Deployment roll). The annotation changes the Deployment's generation, so each write is
//! followed by one more reconcile, which finds the hash current and writes nothing.
//!
//! ```text
//! cargo run --features kube --example configmap_hash -- --target 127.0.0.1:7470 \
//!     --kubeconfig ~/.kube/config --namespace demo
//! ```
#![allow(dead_code)] // the tests use this file as a module too

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use informerd::{
    Action, Context, Controller, IndexSpec, Informer, InformerSpec, Predicate, WatchConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The pod template annotation that carries the hash.
pub const ANNOTATION: &str = "informerd.io/configmap-hash";
/// The field manager of the writes.
pub const FIELD_MANAGER: &str = "configmap-hash";
/// The controller's (and its queue's) name.
pub const NAME: &str = "configmap-hash";
/// The Deployment informer's index of mounted ConfigMap names.
pub const INDEX: &str = "configmaps";

/// What the reconciles share.
pub struct State {
    kube: kube::Client,
    configmaps: Informer,
    /// The generations each Deployment was reconciled at, by key (for tests and curiosity).
    pub reconciled: Mutex<HashMap<String, Vec<i64>>>,
}

/// The names of the ConfigMaps a Deployment's pod template mounts as volumes, sorted, each once.
pub fn mounted_configmaps(deployment: &Deployment) -> Vec<String> {
    let volumes = deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut names: Vec<String> = volumes
        .iter()
        .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()))
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The hash of the ConfigMaps `(name, object JSON or None when absent)`, in the order given:
/// the first 32 hex digits of the SHA-256 of one line per ConfigMap, `name=content\n`, where
/// content is `-` for a missing ConfigMap, else `{"binaryData": ..., "data": ...}` written as
/// Python's `json.dumps(..., sort_keys=True)` writes it (the Python example's definition).
pub fn configmaps_hash(configmaps: &[(String, Option<Value>)]) -> String {
    let mut text = String::new();
    for (name, cm) in configmaps {
        let content = match cm {
            None => "-".to_string(),
            Some(cm) => {
                let field = |f: &str| cm.get(f).cloned().unwrap_or(Value::Null);
                let mut out = String::new();
                python_json(
                    &json!({"data": field("data"), "binaryData": field("binaryData")}),
                    &mut out,
                );
                out
            }
        };
        let _ = writeln!(text, "{name}={content}");
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(hex, "{b:02x}");
    }
    hex.truncate(32);
    hex
}

/// JSON as Python's `json.dumps(v, sort_keys=True)` writes it: `", "` and `": "` separators,
/// keys sorted by code point, everything outside printable ASCII escaped as `\uXXXX`.
fn python_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => python_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0)); // UTF-8 byte order is code point order
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_string(k, out);
                out.push_str(": ");
                python_json(item, out);
            }
            out.push('}');
        }
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// The controller on `namespace` and the state its reconciles share; run it with [`run`].
pub async fn controller(
    client: informerd::Client,
    kube: kube::Client,
    namespace: &str,
) -> informerd::Result<(Controller<Deployment>, Arc<State>)> {
    // The same spec as the controller's ConfigMap informer: the same shared informer.
    let configmaps = client
        .informers()
        .ensure(InformerSpec::of::<ConfigMap>().namespace(namespace))
        .await?;
    let controller = Controller::<Deployment>::new(client, NAME)
        .namespace(namespace)
        .predicate(Predicate::generation_changed())
        .index(IndexSpec::field(
            INDEX,
            "spec.template.spec.volumes.configMap.name",
        ))
        .watches::<ConfigMap>(INDEX, WatchConfig::default().by_name())
        .concurrency(2);
    let state = Arc::new(State {
        kube,
        configmaps,
        reconciled: Mutex::new(HashMap::new()),
    });
    Ok((controller, state))
}

/// Runs the controller until it is shut down (then it drains).
pub async fn run(controller: Controller<Deployment>, state: Arc<State>) -> informerd::Result<()> {
    controller
        .run(reconcile, |_, _, _| Action::requeue_rate_limited(), state)
        .await
}

async fn reconcile(d: Arc<Deployment>, ctx: Context<State>) -> informerd::Result<Action> {
    let generation = d.metadata.generation.unwrap_or_default();
    ctx.reconciled
        .lock()
        .unwrap()
        .entry(ctx.key().to_string())
        .or_default()
        .push(generation);
    let names = mounted_configmaps(&d);
    if names.is_empty() {
        return Ok(Action::await_change());
    }
    let mut configmaps = Vec::with_capacity(names.len());
    for name in names {
        let cm = ctx
            .configmaps
            .get(&format!("{}/{name}", ctx.namespace()))
            .await?;
        configmaps.push((name, cm.map(|o| o.value()).transpose()?));
    }
    let value = configmaps_hash(&configmaps);
    let current = d
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION));
    if current == Some(&value) {
        return Ok(Action::await_change());
    }
    let names: Vec<&str> = configmaps.iter().map(|(n, _)| n.as_str()).collect();
    tracing::info!("ConfigMaps {} hash to {value}", names.join(","));
    let api: Api<Deployment> = Api::namespaced(ctx.kube.clone(), ctx.namespace());
    let intent = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": ctx.name(), "namespace": ctx.namespace()},
        "spec": {"template": {"metadata": {"annotations": {ANNOTATION: value}}}},
    });
    api.patch(
        ctx.name(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(intent),
    )
    .await?;
    Ok(Action::await_change())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::args("configmap_hash: stamp Deployments with a hash of their ConfigMaps");
    common::init_logging();
    let client = informerd::Client::connect(args.connect_options()?)?;
    let kube = common::kube_client(&args.kubeconfig).await?;
    let (controller, state) = controller(client, kube, &args.namespace).await?;
    run(controller.shutdown_on_signal(), state).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_python_examples() {
        // Values computed by the Python example's code (sdk/python/examples/configmap_hash.py).
        let odd = json!({"data": {"v": "1", "b\u{e9}\"\\\u{7f}": "x\n\t\u{1F600}"}});
        let binary = json!({"binaryData": {"k": "AAE="}});
        let mut out = String::new();
        python_json(&json!({"data": odd["data"], "binaryData": null}), &mut out);
        assert_eq!(
            out,
            r#"{"binaryData": null, "data": {"b\u00e9\"\\\u007f": "x\n\t\ud83d\ude00", "v": "1"}}"#
        );
        assert_eq!(
            configmaps_hash(&[
                ("cm-a".into(), Some(odd)),
                ("cm-b".into(), None),
                ("cm-c".into(), Some(binary)),
            ]),
            "2323a0ff15d62b236f812e3c1b27b7b4"
        );
        assert_eq!(
            configmaps_hash(&[("cm-a".into(), Some(json!({"data": {"v": "1"}})))]),
            "828b2c6d8de5c331b63bf12f93bf022c"
        );
    }
}
