//! A daemon restart: watches reconnect, start over with a fresh snapshot, and Stores drop the
//! keys deleted while the daemon was away.
use informerd::testing::{Signal, wait_until};
use informerd::{Event, InformerSpec, Store, WatchParams};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::common::*;

#[tokio::test]
async fn a_watch_reconnects_after_a_daemon_restart_and_starts_over() -> TestResult {
    let mut env = env().await;
    let (api, client) = (&env.api, env.client.clone());
    api.seed("configmaps", "watch-restart", 3).await?;
    let cms = synced_configmaps(
        &client,
        InformerSpec::new("v1", "ConfigMap").namespace("watch-restart"),
    )
    .await;
    let mut watch = cms.watch(WatchParams::default());
    assert_eq!(read_until_synced(&mut watch).await.len(), 3);

    env.daemon.stop(Signal::Term).await;
    api.delete_configmap("watch-restart", "seed-0000000")
        .await?;
    env.daemon.start_again().await?;

    match next_event(&mut watch).await {
        Event::Reconnecting { error } => assert!(error.is_transient(), "{error}"),
        other => panic!("want Reconnecting, got {other:?}"),
    }
    // Further attempts may fail while the daemon comes back; then the fresh snapshot (the
    // watch re-ensured the informer the restart lost, under the same id).
    let mut initial = Vec::new();
    loop {
        match next_event(&mut watch).await {
            Event::Reconnecting { .. } => {
                assert!(initial.is_empty(), "Reconnecting inside a snapshot")
            }
            Event::Added {
                object,
                initial: true,
            } => initial.push(object.key().to_string()),
            Event::Synced => break,
            other => panic!("before Synced: {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(
        initial,
        strings(["watch-restart/seed-0000001", "watch-restart/seed-0000002"])
    );
    assert_eq!(client.informers().get(cms.id()).await?.id(), cms.id());

    api.put_configmap("watch-restart", "after", &[("v", "1")], &[])
        .await?;
    match next_event(&mut watch).await {
        Event::Added {
            object,
            initial: false,
        } => assert_eq!(object.key(), "watch-restart/after"),
        other => panic!("want the new object, got {other:?}"),
    }
    Ok(())
}

async fn a_store_converges_across_a_restart(signal: Signal) -> TestResult {
    let mut env = env().await;
    let (api, client) = (&env.api, env.client.clone());
    let ns = "store-restart";
    api.seed("configmaps", ns, 10).await?;
    let cms = synced_configmaps(&client, InformerSpec::new("v1", "ConfigMap").namespace(ns)).await;
    let store = Store::<ConfigMap>::start(&cms)?;
    store.wait_until_ready(HANG).await?;
    assert_eq!(store.len(), 10);

    env.daemon.stop(signal).await;
    // While the daemon is away: two deletes, an update and a create it never sees as events.
    api.delete_configmap(ns, "seed-0000000").await?;
    api.delete_configmap(ns, "seed-0000001").await?;
    api.put_configmap(ns, "seed-0000002", &[("changed", "yes")], &[])
        .await?;
    api.put_configmap(ns, "new", &[], &[]).await?;
    // Reads meanwhile see the last known state.
    assert_eq!(store.len(), 10);
    env.daemon.start_again().await?;

    let mut expected: Vec<String> = (2..10).map(|i| format!("{ns}/seed-{i:07}")).collect();
    expected.push(format!("{ns}/new"));
    expected.sort();
    wait_until(
        HANG,
        "the Store holds the daemon's objects after the restart",
        || {
            let done = store.keys() == expected
                && store.get(&format!("{ns}/seed-0000002")).is_some_and(|cm| {
                    cm.data
                        .as_ref()
                        .is_some_and(|d| d.get("changed").is_some_and(|v| v == "yes"))
                });
            async move { done }
        },
    )
    .await?;
    assert!(store.reconnects() >= 1);
    assert!(store.error().is_none());
    assert_eq!(store.index_keys("namespace", ns)?, expected);
    Ok(())
}

#[tokio::test]
async fn a_store_converges_across_a_daemon_restart_sigterm() -> TestResult {
    a_store_converges_across_a_restart(Signal::Term).await
}

#[tokio::test]
async fn a_store_converges_across_a_daemon_restart_sigkill() -> TestResult {
    a_store_converges_across_a_restart(Signal::Kill).await
}
