//! The real kube-apiserver fixture: informerd on it, a Store of its namespaces.
use std::time::Duration;

use informerd::testing::{Daemon, KubeApiServer, wait_until};
use informerd::{InformerSpec, Store};
use k8s_openapi::api::core::v1::Namespace;

use crate::common::*;

#[tokio::test]
async fn a_daemon_on_the_real_kube_apiserver_serves_a_store() -> TestResult {
    let kube = KubeApiServer::start(Duration::from_secs(180)).await?;
    assert!(
        kube.server().starts_with("https://127.0.0.1:"),
        "{}",
        kube.server()
    );
    let pid = kube.pid();
    let daemon = Daemon::start(kube.kubeconfig()).await?;
    let client = daemon.client()?;
    // The API server makes its system namespaces itself (cluster-scoped: keys are names).
    let namespaces = client
        .informers()
        .ensure(InformerSpec::new("v1", "Namespace"))
        .await?;
    namespaces.wait_for_sync(HANG).await?;
    let store = Store::<Namespace>::start(&namespaces)?;
    store.wait_until_ready(HANG).await?;
    wait_until(HANG, "the Store holds default and kube-system", || {
        let found = store.contains("default") && store.contains("kube-system");
        async move { found }
    })
    .await?;
    let default = store.get("default").expect("default");
    assert_eq!(default.metadata.name.as_deref(), Some("default"));
    assert_eq!(store.index_keys("namespace", "")?.len(), store.len());
    assert_eq!(store.decode_errors(), 0);

    drop(store);
    drop(daemon);
    drop(kube);
    // SAFETY: signal 0 only checks whether the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    assert!(!alive, "kube-apiserver {pid} outlived its handle");
    Ok(())
}
