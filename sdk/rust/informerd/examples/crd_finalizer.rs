//! Example: a CRD controller with a finalizer and a status (the Rust twin of the Python SDK's
//! `examples/crd_finalizer.py`).
//!
//! `Widget` objects (`example.informerd.io/v1`, a `#[derive(CustomResource)]` type) each hold an
//! entry in a shared ConfigMap, `widget-inventory` — something the garbage collector cannot clean
//! up for us, hence the finalizer. The reconcile, through [`informerd::kube::finalizer`]:
//!
//! - on a live Widget: adds the finalizer (first reconcile), writes `data.<widget>: <spec.size>`
//!   into the inventory by server-side apply (each Widget has its own field manager, so each
//!   owns its own key), then patches the status: `observedGeneration` and a `Ready` condition.
//!   Neither the finalizer nor the status write changes `metadata.generation`, and the
//!   controller's generation predicate drops updates that leave it unchanged: they do not wake
//!   it again.
//! - on a Widget being deleted: applies the Widget's manager's intent without its key
//!   (server-side apply removes the field it owned), then removes the finalizer, and the API
//!   server deletes the Widget.
//!
//! ```text
//! cargo run --features kube --example crd_finalizer -- --target 127.0.0.1:7470 \
//!     --kubeconfig ~/.kube/config --namespace demo
//! ```
#![allow(dead_code)] // the tests use this file as a module too

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use informerd::kube::{Event, FinalizerError, StatusPatch, finalizer, patch_status, set_condition};
use informerd::{Action, Context, Controller, Predicate};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer this controller owns.
pub const FINALIZER: &str = "example.informerd.io/inventory";
/// The shared ConfigMap with one entry per Widget.
pub const INVENTORY: &str = "widget-inventory";
/// The controller's (and its queue's) name.
pub const NAME: &str = "widgets";

/// A Widget's spec: how many of it the inventory lists.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.informerd.io",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    /// The inventory's count.
    #[schemars(range(min = 0))]
    pub size: i64,
}

/// What the controller last did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `metav1.Condition`s; `Ready` once the inventory lists the Widget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// Applies the Widget CRD and waits (at most 60 s) until it is served.
pub async fn install_crd(kube: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    let name = Widget::crd_name();
    crds.patch(
        name,
        &PatchParams::apply("widget-example").force(),
        &Patch::Apply(Widget::crd()),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "CRD {name} not Established within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the reconciles share.
pub struct State {
    kube: kube::Client,
    /// The generations each Widget was reconciled at, by key.
    pub reconciled: Mutex<HashMap<String, Vec<i64>>>,
    /// What each reconcile did, by key: `"applied"` or `"cleaned_up"`.
    pub events: Mutex<HashMap<String, Vec<&'static str>>>,
}

/// The controller on `namespace` and the state its reconciles share; run it with [`run`].
pub fn controller(
    client: informerd::Client,
    kube: kube::Client,
    namespace: &str,
) -> (Controller<Widget>, Arc<State>) {
    let controller = Controller::<Widget>::new(client, NAME)
        .namespace(namespace)
        .predicate(Predicate::generation_changed())
        .concurrency(2);
    let state = Arc::new(State {
        kube,
        reconciled: Mutex::new(HashMap::new()),
        events: Mutex::new(HashMap::new()),
    });
    (controller, state)
}

/// Runs the controller until it is shut down (then it drains).
pub async fn run(controller: Controller<Widget>, state: Arc<State>) -> informerd::Result<()> {
    controller
        .run(reconcile, |_, _, _| Action::requeue_rate_limited(), state)
        .await
}

type Error = FinalizerError<informerd::Error>;

async fn reconcile(widget: Arc<Widget>, ctx: Context<State>) -> Result<Action, Error> {
    let key = ctx.key().to_string();
    let generation = widget.metadata.generation.unwrap_or_default();
    ctx.reconciled
        .lock()
        .unwrap()
        .entry(key.clone())
        .or_default()
        .push(generation);
    let api: Api<Widget> = Api::namespaced(ctx.kube.clone(), ctx.namespace());
    let added = !widget.finalizers().iter().any(|f| f == FINALIZER);
    finalizer(&api, FINALIZER, widget, |event| async {
        let done = match event {
            Event::Apply(w) => provision(&ctx, &w).await.map(|()| "applied"),
            Event::Cleanup(w) => release(&ctx, &w).await.map(|()| "cleaned_up"),
        }?;
        ctx.events
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .push(done);
        tracing::info!("{done} (finalizer added: {added})");
        Ok(Action::await_change())
    })
    .await
}

/// The inventory ConfigMap as the Widget's own field manager intends it.
fn inventory(widget: &Widget, entry: Option<String>) -> serde_json::Value {
    let mut intent = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": INVENTORY, "namespace": widget.namespace()},
    });
    if let Some(value) = entry {
        intent["data"] = json!({ widget.name_any(): value });
    }
    intent
}

async fn apply_inventory(
    ctx: &Context<State>,
    widget: &Widget,
    entry: Option<String>,
) -> informerd::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), ctx.namespace());
    let manager = format!("widget-{}", widget.name_any());
    api.patch(
        INVENTORY,
        &PatchParams::apply(&manager).force(),
        &Patch::Apply(inventory(widget, entry)),
    )
    .await?;
    Ok(())
}

async fn provision(ctx: &Context<State>, widget: &Widget) -> informerd::Result<()> {
    let (name, size) = (widget.name_any(), widget.spec.size);
    let generation = widget.metadata.generation;
    apply_inventory(ctx, widget, Some(size.to_string())).await?;
    let mut status = widget.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    set_condition(
        &mut status.conditions,
        Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Provisioned".into(),
            message: format!("inventory entry {name}={size}"),
            observed_generation: generation,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        },
    );
    let api: Api<Widget> = Api::namespaced(ctx.kube.clone(), ctx.namespace());
    patch_status(&api, &name, &status, &StatusPatch::apply(NAME).force()).await?;
    Ok(())
}

async fn release(ctx: &Context<State>, widget: &Widget) -> informerd::Result<()> {
    // The Widget's manager applies an intent without its key: the API server removes it.
    apply_inventory(ctx, widget, None).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::args("crd_finalizer: a Widget controller with a finalizer and a status");
    common::init_logging();
    let client = informerd::Client::connect(args.connect_options()?)?;
    let kube = common::kube_client(&args.kubeconfig).await?;
    install_crd(&kube).await?;
    let (controller, state) = controller(client, kube, &args.namespace);
    run(controller.shutdown_on_signal(), state).await?;
    Ok(())
}
