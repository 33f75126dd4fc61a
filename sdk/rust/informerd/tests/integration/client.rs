//! The client layer against real servers: the token on the wire, deadlines against a dead
//! port, a unix socket target.
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informerd::testing::Daemon;
use informerd::v1::ListClustersRequest;
use informerd::{Client, ConnectOptions, InformerSpec};
use prost::bytes::Bytes;

use crate::common::*;

async fn clusters(client: &Client) -> informerd::Result<Vec<String>> {
    let mut rpc = client.admin_raw();
    let resp = client
        .unary("ListClusters", None, ListClustersRequest {}, |r| {
            rpc.list_clusters(r)
        })
        .await?;
    Ok(resp.clusters.into_iter().map(|c| c.name).collect())
}

/// An HTTP/2 server that answers every gRPC call with an empty message and records the
/// `authorization` header of each.
async fn recording_server() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let auth = request
                        .headers()
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_string());
                    record.lock().unwrap().push(auth);
                    let head = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .body(())
                        .unwrap();
                    let mut body = respond.send_response(head, false).unwrap();
                    // One empty message: no compression flag, length 0.
                    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false)
                        .unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    body.send_trailers(trailers).unwrap();
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn the_token_goes_on_every_call_and_a_token_file_is_read() -> TestResult {
    let (addr, seen) = recording_server().await;
    let client = Client::connect(
        ConnectOptions::new(addr.clone())
            .token("s3cret")
            .timeout(Duration::from_secs(10)),
    )?;
    bounded("ListClusters", clusters(&client)).await?;
    bounded("ListClusters", clusters(&client)).await?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "from-file\n")?;
    let client = Client::connect(
        ConnectOptions::new(addr)
            .token_file(&token_file)
            .timeout(Duration::from_secs(10)),
    )?;
    bounded("ListClusters", clusters(&client)).await?;
    let seen = seen.lock().unwrap().clone();
    let expected = ["Bearer s3cret", "Bearer s3cret", "Bearer from-file"];
    assert_eq!(seen, expected.map(|s| Some(s.to_string())));

    // A daemon that checks no token takes calls that carry one.
    let env = env().await;

    let client = Client::connect(ConnectOptions::new(env.daemon.target()).token("s3cret"))?;
    assert_eq!(clusters(&client).await?, ["default"]);
    Ok(())
}

#[tokio::test]
async fn a_call_to_a_dead_port_fails_transiently_within_its_deadline() -> TestResult {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let client = Client::connect(
        ConnectOptions::new(format!("127.0.0.1:{port}"))
            .timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(1)),
    )?;
    let started = Instant::now();
    let e = clusters(&client).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let e = client
        .informers()
        .ensure(InformerSpec::new("v1", "ConfigMap"))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_unix_socket_target_reaches_the_daemon() -> TestResult {
    let api = informerd::testing::FakeApiServer::start().await?;
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("informerd.sock");
    let listen = format!("--listen=unix://{}", socket.display());
    let daemon = Daemon::start_with(api.kubeconfig(), &[&listen]).await?;
    let client = Client::connect_to(format!("unix://{}", socket.display()))?;
    assert_eq!(
        bounded("ListClusters", clusters(&client)).await?,
        ["default"]
    );
    // The same daemon over TCP sees what the unix client made.
    let cms = client
        .informers()
        .ensure(InformerSpec::new("v1", "ConfigMap").namespace("unix"))
        .await?;
    let over_tcp = daemon.client()?.informers().get(cms.id()).await?;
    assert_eq!(over_tcp.id(), cms.id());
    Ok(())
}
