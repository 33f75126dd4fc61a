//! Informers: ensure, wait_for_sync, get, list (selectors, indexes), list_batches, watch.
use futures::StreamExt;
use informerd::{ErrorReason, Event, IndexSpec, InformerSpec, ListParams, WatchParams};

use crate::common::*;

#[tokio::test]
async fn list_filters_by_namespace_selectors_and_indexes() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    for ns in ["list-a", "list-b"] {
        api.create_namespace(ns).await?;
    }
    api.put_configmap(
        "list-a",
        "web-1",
        &[("tier", "front")],
        &[("list-app", "web")],
    )
    .await?;
    api.put_configmap(
        "list-a",
        "web-2",
        &[("tier", "front")],
        &[("list-app", "web")],
    )
    .await?;
    api.put_configmap("list-a", "db-1", &[("tier", "back")], &[("list-app", "db")])
        .await?;
    api.put_configmap(
        "list-b",
        "web-3",
        &[("tier", "front")],
        &[("list-app", "web")],
    )
    .await?;
    api.put_configmap("list-b", "unlabelled", &[], &[]).await?;
    let spec = InformerSpec::new("v1", "ConfigMap")
        .label_selector("list-app")
        .index(IndexSpec::label("app", "list-app"))
        .index(IndexSpec::field("name", "metadata.name"));
    let cms = synced_configmaps(client, spec).await;
    assert_eq!(cms.kind(), "ConfigMap");
    assert!(cms.namespaced());

    let list = |p: ListParams| {
        let cms = cms.clone();
        async move { keys(&cms.list(p).await.expect("list")) }
    };
    assert_eq!(
        list(ListParams::default()).await,
        strings([
            "list-a/db-1",
            "list-a/web-1",
            "list-a/web-2",
            "list-b/web-3"
        ])
    );
    assert_eq!(
        list(ListParams::default().namespace("list-b")).await,
        strings(["list-b/web-3"])
    );
    assert_eq!(
        list(ListParams::default().labels("list-app=web")).await,
        strings(["list-a/web-1", "list-a/web-2", "list-b/web-3"])
    );
    assert_eq!(
        list(ListParams::default().labels("list-app!=web")).await,
        strings(["list-a/db-1"])
    );
    assert_eq!(
        list(ListParams::default().fields("metadata.name=web-2")).await,
        strings(["list-a/web-2"])
    );
    assert_eq!(
        list(ListParams::default().index("app", "web")).await,
        strings(["list-a/web-1", "list-a/web-2", "list-b/web-3"])
    );
    assert_eq!(
        list(ListParams::default().index("name", "db-1")).await,
        strings(["list-a/db-1"])
    );
    assert_eq!(
        list(ListParams::default().index("namespace", "list-a")).await,
        strings(["list-a/db-1", "list-a/web-1", "list-a/web-2"])
    );
    assert!(
        list(ListParams::default().index("app", "none"))
            .await
            .is_empty()
    );

    let db = cms.get("list-a/db-1").await?.expect("db-1 is cached");
    assert_eq!(db.name(), "db-1");
    assert_eq!(db.namespace(), "list-a");
    assert_eq!(
        db.meta().labels.get("list-app").map(String::as_str),
        Some("db")
    );
    assert_eq!(db.value()?["data"], serde_json::json!({"tier": "back"}));
    let typed: k8s_openapi::api::core::v1::ConfigMap =
        cms.get_as("list-a/db-1").await?.expect("typed");
    assert_eq!(typed.data.unwrap()["tier"], "back");
    assert!(
        cms.get("list-b/unlabelled").await?.is_none(),
        "outside the informer's selector"
    );
    assert!(cms.get("list-a/absent").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn list_batches_stream_bounded_batches() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.seed("configmaps", "list-batches", 25).await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("list-batches"),
    )
    .await;
    let mut sizes = Vec::new();
    let mut batches = cms.list_batches(ListParams::default().batch_size(10));
    while let Some(batch) = bounded("a batch", batches.next()).await {
        sizes.push(batch?.len());
    }
    assert_eq!(sizes, [10, 10, 5]);
    // Leaving early cancels the stream; the next call works.
    let mut batches = cms.list_batches(ListParams::default().batch_size(1));
    assert_eq!(
        bounded("a batch", batches.next())
            .await
            .expect("one batch")?
            .len(),
        1
    );
    drop(batches);
    assert_eq!(
        cms.list(ListParams::default().batch_size(7)).await?.len(),
        25
    );
    Ok(())
}

#[tokio::test]
async fn watch_sends_the_snapshot_synced_then_each_keys_changes_in_order() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.create_namespace("watch-order").await?;
    api.put_configmap("watch-order", "existing", &[("v", "0")], &[])
        .await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("watch-order"),
    )
    .await;
    let mut watch = cms.watch(WatchParams::default().include_old_object());
    assert_eq!(
        read_until_synced(&mut watch).await,
        strings(["watch-order/existing"])
    );

    api.put_configmap("watch-order", "a", &[("v", "1")], &[])
        .await?;
    api.put_configmap("watch-order", "a", &[("v", "2")], &[])
        .await?;
    api.put_configmap("watch-order", "b", &[("v", "1")], &[])
        .await?;
    api.delete_configmap("watch-order", "a").await?;
    api.delete_configmap("watch-order", "existing").await?;
    let mut by_key: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    let mut of_a = Vec::new();
    for _ in 0..5 {
        let event = next_event(&mut watch).await;
        let (key, what) = match &event {
            Event::Added { object, initial } => {
                assert!(!initial);
                (object.key().to_string(), "ADDED")
            }
            Event::Updated { object, .. } => (object.key().to_string(), "UPDATED"),
            Event::Deleted { object, tombstone } => {
                assert!(!tombstone);
                (object.key().to_string(), "DELETED")
            }
            other => panic!("unexpected {other:?}"),
        };
        if key == "watch-order/a" {
            of_a.push(event);
        }
        by_key.entry(key).or_default().push(what);
    }
    // Per-key order (across keys the daemon's delta FIFO orders keys by their first change).
    assert_eq!(by_key["watch-order/a"], ["ADDED", "UPDATED", "DELETED"]);
    assert_eq!(by_key["watch-order/b"], ["ADDED"]);
    assert_eq!(by_key["watch-order/existing"], ["DELETED"]);
    match &of_a[1] {
        Event::Updated { object, old } => {
            assert_eq!(object.value()?["data"]["v"], "2");
            assert_eq!(
                old.as_ref().expect("include_old_object").value()?["data"]["v"],
                "1"
            );
        }
        other => panic!("{other:?}"),
    }
    match &of_a[2] {
        Event::Deleted { object, .. } => assert_eq!(object.value()?["data"]["v"], "2"),
        other => panic!("{other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_namespaced_watch_of_a_cluster_wide_informer_sees_only_its_namespace() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    for ns in ["wns-a", "wns-b"] {
        api.create_namespace(ns).await?;
        api.put_configmap(ns, "first", &[], &[]).await?;
    }
    let cms = synced_configmaps(client, InformerSpec::new("v1", "ConfigMap")).await;
    let mut watch = cms.watch(WatchParams::default().namespace("wns-a"));
    assert_eq!(
        read_until_synced(&mut watch).await,
        strings(["wns-a/first"])
    );
    // A change in the other namespace first: it must not arrive before (or instead of) a's.
    api.put_configmap("wns-b", "second", &[], &[]).await?;
    api.put_configmap("wns-a", "second", &[], &[]).await?;
    match next_event(&mut watch).await {
        Event::Added { object, .. } => assert_eq!(object.key(), "wns-a/second"),
        other => panic!("unexpected {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_watch_ends_with_the_error_when_its_informer_is_deleted() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.seed("configmaps", "watch-deleted", 2).await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("watch-deleted"),
    )
    .await;
    let mut watch = cms.watch(WatchParams::default());
    assert_eq!(read_until_synced(&mut watch).await.len(), 2);
    cms.delete().await?;
    let e = bounded("the watch's end", watch.next())
        .await
        .expect("an error, not the end")
        .unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InformerDeleted), "{e}");
    assert!(bounded("the end", watch.next()).await.is_none());
    // Not brought back by the watch.
    let e = client.informers().get(cms.id()).await.unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InformerNotFound), "{e}");
    Ok(())
}

#[tokio::test]
async fn an_unknown_kind_is_not_found_with_the_reason() -> TestResult {
    let env = env().await;
    let client = &env.client;
    let e = client
        .informers()
        .ensure(InformerSpec::new("v1", "ConfigMapp"))
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.reason(), Some(ErrorReason::ResourceNotFound), "{e}");
    assert_eq!(
        e.status().unwrap().metadata.get("kind").map(String::as_str),
        Some("ConfigMapp")
    );
    assert!(!e.is_transient());
    let e = client
        .informers()
        .get("no-such-informer")
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InformerNotFound), "{e}");
    Ok(())
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    // Refused before anything is sent.
    let e = client
        .informers()
        .ensure(InformerSpec::new("v1", ""))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("InformerSpec.kind"));
    let e = client
        .informers()
        .ensure(InformerSpec::new("", "ConfigMap"))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("InformerSpec.api_version"));
    // Refused by the daemon, which names the field.
    let e = client
        .informers()
        .ensure(InformerSpec::new("v1", "ConfigMap").index(IndexSpec::label("Bad Name!", "app")))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InvalidField), "{e}");
    assert_eq!(e.field(), Some("spec.indexes[0].name"), "{e}");

    api.create_namespace("bad-input").await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("bad-input"),
    )
    .await;
    let e = cms
        .list(ListParams::default().index("no-such-index", "x"))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("index_name"), "{e}");
    let e = cms
        .list(ListParams::default().labels("a in ("))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("label_selector"), "{e}");
    let e = cms
        .list(ListParams::default().batch_size(10_001))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("ListParams.batch_size"));
    let e = cms
        .list(ListParams::default().index("", "x"))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("ListParams.index"));
    let mut watch = cms.watch(WatchParams::default().max_batch_bytes(u32::MAX));
    let e = bounded("the refusal", watch.next())
        .await
        .expect("an error")
        .unwrap_err();
    assert_eq!(e.field(), Some("WatchParams.max_batch_bytes"));
    Ok(())
}
