//! What every test needs: a fake API server, a daemon on it, a client, and bounded waits.
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use informerd::testing::{Daemon, FakeApiServer};
use informerd::{Client, Event, Informer, InformerSpec, Watch};

/// Generous bounds for a loaded 2-core machine: they catch hangs, not slowness.
pub const HANG: Duration = Duration::from_secs(60);

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The processes of one test; stopped when dropped. Keep it whole (`let env = env().await`):
/// a field left to `..` in a destructuring `let` is dropped, and its process stopped, at once.
pub struct Env {
    pub api: FakeApiServer,
    pub daemon: Daemon,
    pub client: Client,
}

pub async fn env() -> Env {
    let api = FakeApiServer::start()
        .await
        .expect("the fake API server starts");
    let daemon = Daemon::start(api.kubeconfig())
        .await
        .expect("informerd starts");
    let client = daemon.client().expect("a client");
    Env {
        api,
        daemon,
        client,
    }
}

/// `future`, or a panic naming `what` after [`HANG`].
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, future).await {
        Ok(v) => v,
        Err(_) => panic!("not within {HANG:?}: {what}"),
    }
}

/// A ConfigMap informer on `namespace`, synced.
pub async fn synced_configmaps(client: &Client, spec: InformerSpec) -> Informer {
    let informer = client.informers().ensure(spec).await.expect("ensure");
    informer.wait_for_sync(HANG).await.expect("wait_for_sync");
    informer
}

/// The next event of a watch within [`HANG`]; panics on an error or the end.
pub async fn next_event(watch: &mut Watch) -> Event {
    match bounded("the next watch event", watch.next()).await {
        Some(Ok(e)) => e,
        Some(Err(e)) => panic!("the watch failed: {e}"),
        None => panic!("the watch ended"),
    }
}

/// The initial objects up to Synced, their keys sorted.
pub async fn read_until_synced(watch: &mut Watch) -> Vec<String> {
    let mut keys = Vec::new();
    loop {
        match next_event(watch).await {
            Event::Synced => break,
            Event::Added {
                object,
                initial: true,
            } => keys.push(object.key().to_string()),
            other => panic!("before Synced: {other:?}"),
        }
    }
    keys.sort();
    keys
}

pub fn keys(objects: &[informerd::Object]) -> Vec<String> {
    let mut keys: Vec<String> = objects.iter().map(|o| o.key().to_string()).collect();
    keys.sort();
    keys
}

pub fn strings<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}
