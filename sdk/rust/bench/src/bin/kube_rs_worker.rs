//! kube-rs' own `kube::runtime::Controller` reconciling ConfigMaps, as its users write it: the
//! controller's reflector keeps this replica's own cache and watch. The reconcile is a no-op that
//! prints `seen KEY` the first time it sees a key; the worker runs until it is killed.
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use futures::StreamExt;
use informerd_bench::{Args, READY, emit, emit_seen};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

const USAGE: &str = "\
kube-rs-worker --kubeconfig=PATH --namespace=NS

kube::runtime::Controller on the ConfigMaps of NS (a default watcher::Config: list, then watch),
with a no-op reconcile that prints `seen NS/NAME` the first time it sees a key. Prints `ready`
once the controller is set up; runs until killed.";

/// The keys reconciled so far.
#[derive(Default)]
struct Seen(Mutex<HashSet<String>>);

async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, Infallible> {
    let key = format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any());
    let first = seen
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone());
    if first {
        emit_seen([key.as_str()]);
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, _: &Infallible, _: Arc<Seen>) -> Action {
    Action::await_change()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::from_env(USAGE)?;
    let path = args.required("kubeconfig")?;
    let namespace = args.required("namespace")?;
    let kubeconfig =
        Kubeconfig::read_from(&path).with_context(|| format!("--kubeconfig={path}"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("--kubeconfig={path}"))?;
    let client = kube::Client::try_from(config).context("kube client")?;
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let controller = Controller::new(api, watcher::Config::default());
    emit(READY);
    controller
        .run(reconcile, error_policy, Arc::new(Seen::default()))
        .for_each(|result| async move {
            if let Err(e) = result {
                eprintln!("kube-rs-worker: {e}");
            }
        })
        .await;
    Ok(())
}
