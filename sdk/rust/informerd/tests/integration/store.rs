//! Store: a local mirror of one informer, against a real daemon.
use std::collections::BTreeMap;
use std::sync::Arc;

use informerd::testing::wait_until;
use informerd::{ErrorReason, Informer, InformerSpec, Store};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde::Deserialize;

use crate::common::*;

fn data(cm: &ConfigMap, key: &str) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
        .unwrap_or_default()
}

fn label(cm: &ConfigMap, key: &str) -> Vec<String> {
    cm.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .into_iter()
        .collect()
}

/// Subscribers of the informer's Watch in the daemon.
async fn subscribers(informer: &Informer) -> u32 {
    let mut informer = informer.clone();
    informer
        .refresh()
        .await
        .ok()
        .and_then(|i| i.state.as_ref().map(|s| s.subscribers))
        .unwrap_or(u32::MAX)
}

#[tokio::test]
async fn a_store_mirrors_creates_updates_and_deletes_with_indexes() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    let ns = "store-basic";
    api.create_namespace(ns).await?;
    api.put_configmap(ns, "a", &[("node", "n1")], &[("app", "web")])
        .await?;
    api.put_configmap(ns, "b", &[("node", "n2")], &[("app", "web")])
        .await?;
    api.put_configmap(ns, "c", &[("node", "n1")], &[("app", "db")])
        .await?;
    let cms = synced_configmaps(client, InformerSpec::new("v1", "ConfigMap").namespace(ns)).await;
    let store = Store::<ConfigMap>::builder(&cms)
        .index("by-node", |cm: &ConfigMap| vec![data(cm, "node")])
        .index("by-app", |cm: &ConfigMap| label(cm, "app"))
        .start()?;
    store.wait_until_ready(HANG).await?;
    assert!(store.is_ready());
    assert_eq!(
        store.keys(),
        strings(["store-basic/a", "store-basic/b", "store-basic/c"])
    );
    assert_eq!(store.len(), 3);
    assert!(!store.is_empty());
    assert_eq!(data(&store.get("store-basic/a").expect("a"), "node"), "n1");
    assert!(store.get("store-basic/absent").is_none());
    let names = |objects: Vec<Arc<ConfigMap>>| -> Vec<String> {
        objects
            .iter()
            .map(|cm| cm.metadata.name.clone().unwrap())
            .collect()
    };
    assert_eq!(names(store.state()), ["a", "b", "c"]);
    assert_eq!(names(store.by_index("by-node", "n1")?), ["a", "c"]);
    assert_eq!(
        store.index_keys("by-app", "web")?,
        strings(["store-basic/a", "store-basic/b"])
    );
    assert_eq!(store.index_values("by-node")?, strings(["n1", "n2"]));
    assert_eq!(store.index_keys("namespace", ns)?, store.keys());
    assert!(store.by_index("by-node", "n9")?.is_empty());
    let e = store.by_index("no-such-index", "x").unwrap_err();
    assert_eq!(e.field(), Some("index"));
    assert!(e.to_string().contains("no-such-index"), "{e}");

    // A clone shares the cache.
    let clone = store.clone();
    api.put_configmap(ns, "d", &[("node", "n3")], &[]).await?;
    api.put_configmap(ns, "a", &[("node", "n2")], &[("app", "web")])
        .await?;
    api.delete_configmap(ns, "c").await?;
    wait_until(HANG, "the Store mirrors the three changes", || {
        let done = clone.keys() == strings(["store-basic/a", "store-basic/b", "store-basic/d"])
            && clone
                .get("store-basic/a")
                .is_some_and(|a| data(&a, "node") == "n2");
        async move { done }
    })
    .await?;
    assert!(store.index_keys("by-node", "n1")?.is_empty());
    assert_eq!(
        store.index_keys("by-node", "n2")?,
        strings(["store-basic/a", "store-basic/b"])
    );
    assert_eq!(store.index_values("by-node")?, strings(["n2", "n3"]));
    assert_eq!(store.index_keys("by-app", "db")?, Vec::<String>::new());
    assert_eq!(store.decode_errors(), 0);
    assert!(store.error().is_none());
    Ok(())
}

/// A type that only some ConfigMaps are: those with a `data` map.
#[derive(Debug, Deserialize)]
struct WithData {
    data: BTreeMap<String, String>,
}

#[tokio::test]
async fn objects_that_do_not_decode_are_skipped_and_counted() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    let ns = "store-decode";
    api.create_namespace(ns).await?;
    api.put_configmap(ns, "good", &[("k", "v")], &[]).await?;
    let no_data = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad", "namespace": ns}});
    api.request(
        "POST",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        Some(&no_data),
    )
    .await?;
    let cms = synced_configmaps(client, InformerSpec::new("v1", "ConfigMap").namespace(ns)).await;

    let store = Store::<WithData>::start(&cms)?;
    store.wait_until_ready(HANG).await?;
    assert_eq!(store.keys(), strings(["store-decode/good"]));
    assert_eq!(store.get("store-decode/good").unwrap().data["k"], "v");
    assert_eq!(store.decode_errors(), 1);
    // An update that stops decoding takes the object out; one that decodes again brings it back.
    let good_without_data = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good", "namespace": ns}});
    api.request(
        "PUT",
        &format!("/api/v1/namespaces/{ns}/configmaps/good"),
        Some(&good_without_data),
    )
    .await?;
    wait_until(HANG, "the undecodable update removes good", || {
        let empty = store.is_empty();
        async move { empty }
    })
    .await?;
    assert_eq!(store.decode_errors(), 2);
    api.put_configmap(ns, "bad", &[("now", "ok")], &[]).await?;
    wait_until(HANG, "bad decodes now", || {
        let there = store.contains("store-decode/bad");
        async move { there }
    })
    .await?;
    assert!(store.error().is_none());

    // A Store of the wrong type altogether: every object is skipped, none is fatal.
    let pods = Store::<Pod>::start(&cms)?;
    pods.wait_until_ready(HANG).await?;
    assert!(pods.is_empty());
    assert_eq!(pods.decode_errors(), 2);
    assert!(pods.error().is_none());
    Ok(())
}

#[tokio::test]
async fn a_store_reports_the_error_that_ended_its_watch() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.create_namespace("store-gone").await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("store-gone"),
    )
    .await;
    cms.delete().await?;
    let store = Store::<ConfigMap>::start(&cms)?;
    let e = store.wait_until_ready(HANG).await.unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InformerNotFound), "{e}");
    assert_eq!(
        store.error().expect("kept").reason(),
        Some(ErrorReason::InformerNotFound)
    );
    assert!(!store.is_ready());

    let e = Store::<ConfigMap>::builder(&cms)
        .index("namespace", |_| vec![])
        .start()
        .unwrap_err();
    assert_eq!(e.field(), Some("Store.index(\"namespace\")"));
    let e = Store::<ConfigMap>::builder(&cms)
        .index("x", |_| vec![])
        .index("x", |_| vec![])
        .start()
        .unwrap_err();
    assert_eq!(e.field(), Some("Store.index(\"x\")"));
    Ok(())
}

#[tokio::test]
async fn a_store_that_is_not_ready_in_time_says_so() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.seed("configmaps", "store-slow", 3).await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("store-slow"),
    )
    .await;
    let store = Store::<ConfigMap>::start(&cms)?;
    // Zero time is never enough unless the snapshot already arrived.
    if let Err(e) = store.wait_until_ready(std::time::Duration::ZERO).await {
        assert!(matches!(e, informerd::Error::Timeout { .. }), "{e}");
    }
    store.wait_until_ready(HANG).await?;
    assert_eq!(store.len(), 3);
    Ok(())
}

#[tokio::test]
async fn dropping_the_last_clone_stops_the_watch() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.create_namespace("store-drop").await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("store-drop"),
    )
    .await;
    let store = Store::<ConfigMap>::start(&cms)?;
    store.wait_until_ready(HANG).await?;
    assert_eq!(subscribers(&cms).await, 1);
    let clone = store.clone();
    drop(store);
    // The clone keeps it going.
    api.put_configmap("store-drop", "x", &[], &[]).await?;
    wait_until(HANG, "the clone still mirrors", || {
        let n = clone.len();
        async move { n == 1 }
    })
    .await?;
    assert_eq!(subscribers(&cms).await, 1);
    drop(clone);
    wait_until(HANG, "the daemon lost its subscriber", || {
        let cms = cms.clone();
        async move { subscribers(&cms).await == 0 }
    })
    .await?;
    Ok(())
}
