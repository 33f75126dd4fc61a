//! Replica sets of real daemons on one fake API server: followers send Queues and Work calls to
//! the leader, reads stay where they are, and a controller follows the leader across failovers
//! (SIGKILL, SIGSTOP), cancelling the reconciles of a broken stream at once.
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informerd::testing::{Daemon, FakeApiServer, LeaderElection, Signal, wait_until};
use informerd::v1::LenRequest;
use informerd::{
    Action, Client, ConnectOptions, Context, Controller, Error, InformerSpec, QueueSpec,
    ReconcileEvent, ReconcileEventKind, Replica, ReplicaRole, Source,
};
use serde_json::Value;

use crate::common::{HANG, TestResult, bounded, env, synced_configmaps};
use crate::controller::{queue_idle, queue_state, sample};

const HA_NAMESPACE: &str = "informerd-ha";

/// Daemons on one Lease of their own fake API server, with fast timings (3 s lease).
struct ReplicaSet {
    api: FakeApiServer,
    election: LeaderElection,
    daemons: Vec<Daemon>,
}

impl ReplicaSet {
    async fn new(lease: &str) -> ReplicaSet {
        let api = FakeApiServer::start()
            .await
            .expect("the fake API server starts");
        api.create_namespace(HA_NAMESPACE).await.expect("namespace");
        api.serve_queue_objects().await.expect("Queue objects");
        ReplicaSet {
            api,
            election: LeaderElection::fast(HA_NAMESPACE, lease),
            daemons: Vec::new(),
        }
    }

    async fn start(&mut self, n: usize) {
        for _ in 0..n {
            let d = Daemon::start_replica(self.api.kubeconfig(), &self.election, &[])
                .await
                .expect("a replica starts");
            self.daemons.push(d);
        }
    }

    /// Starts two replicas; returns (leader, follower) indexes once they agree.
    async fn start_pair(&mut self) -> (usize, usize) {
        self.start(2).await;
        let leader = settled_leader(&self.daemons).await;
        (leader, 1 - leader)
    }
}

/// A client of `daemon` with deadline `timeout`.
fn client_of(daemon: &Daemon, timeout: Duration) -> Client {
    Client::connect(ConnectOptions::new(daemon.target()).timeout(timeout)).expect("a client")
}

/// The daemon's Admin.GetReplica, or None when it does not answer.
async fn replica_info(daemon: &Daemon) -> Option<Replica> {
    client_of(daemon, Duration::from_secs(2))
        .admin()
        .get_replica()
        .await
        .ok()
}

/// Waits until one of `daemons` leads and every other one follows it, naming its address;
/// returns the leader's index.
async fn settled_leader(daemons: &[Daemon]) -> usize {
    let found = Mutex::new(None);
    // What each replica said last (role, leader address, or its error): the failure message.
    let seen = Mutex::new(String::new());
    let settled = wait_until(HANG, "one leader, the others following it", || async {
        let mut infos = Vec::new();
        let mut said = Vec::new();
        for d in daemons {
            let client = client_of(d, Duration::from_secs(2));
            let info = client.admin().get_replica().await;
            said.push(match &info {
                Ok(r) => format!(
                    "{}: {:?} leader_address={:?}",
                    d.target(),
                    r.role,
                    r.leader_address
                ),
                Err(e) => format!("{}: {e}", d.target()),
            });
            infos.push(info.ok());
        }
        *seen.lock().unwrap() = said.join("; ");
        let leaders: Vec<usize> = (0..daemons.len())
            .filter(|&i| {
                infos[i]
                    .as_ref()
                    .is_some_and(|r| r.role == ReplicaRole::Leader)
            })
            .collect();
        let [leader] = leaders[..] else {
            return false;
        };
        let agreed = infos.iter().enumerate().all(|(i, info)| {
            i == leader
                || info.as_ref().is_none_or(|r| {
                    r.role == ReplicaRole::Follower && r.leader_address == daemons[leader].target()
                })
        });
        if agreed {
            *found.lock().unwrap() = Some(leader);
        }
        agreed
    })
    .await;
    if let Err(e) = settled {
        panic!(
            "a settled replica set: {e}; last seen: {}",
            seen.lock().unwrap()
        );
    }
    found.into_inner().unwrap().unwrap()
}

// --- Admin.GetReplica ------------------------------------------------------------------------

#[tokio::test]
async fn a_single_daemon_is_standalone() -> TestResult {
    let env = env().await;
    let replica = env.client.admin().get_replica().await?;
    assert_eq!(replica.role, ReplicaRole::Standalone);
    assert!(replica.is_leader());
    assert_eq!(replica.leading_since, None);
    Ok(())
}

#[tokio::test]
async fn get_replica_names_the_leader_its_lease_and_its_term() -> TestResult {
    let mut rs = ReplicaSet::new("ha-info").await;
    let (l, f) = rs.start_pair().await;
    let (leader, follower) = (&rs.daemons[l], &rs.daemons[f]);
    let lead = replica_info(leader).await.expect("the leader answers");
    let follow = replica_info(follower).await.expect("the follower answers");
    let lease = format!("{HA_NAMESPACE}/ha-info");
    assert_eq!(
        (lead.role, lead.identity.as_str(), lead.address.as_str()),
        (ReplicaRole::Leader, leader.identity(), leader.target())
    );
    assert_eq!(
        (
            lead.leader.as_str(),
            lead.leader_address.as_str(),
            lead.lease.as_str()
        ),
        (leader.identity(), leader.target(), lease.as_str())
    );
    assert!(lead.is_leader());
    // The term's tokens come after its epoch, which is at least the wall clock (Unix ns) when
    // the term was taken, just before leading_since (work.proto's Started.epoch).
    let since_ns = lead
        .leading_since
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    assert!(lead.token_epoch + 30_000_000_000 >= since_ns);
    assert!(
        lead.leading_since
            .is_some_and(|t| t <= std::time::SystemTime::now())
    );
    assert_eq!(
        (
            follow.role,
            follow.identity.as_str(),
            follow.address.as_str()
        ),
        (
            ReplicaRole::Follower,
            follower.identity(),
            follower.target()
        )
    );
    assert_eq!(
        (
            follow.leader.as_str(),
            follow.leader_address.as_str(),
            follow.lease.as_str()
        ),
        (leader.identity(), leader.target(), lease.as_str())
    );
    assert!(!follow.is_leader());
    assert_eq!(follow.cluster, lead.cluster);
    Ok(())
}

// --- following the leader --------------------------------------------------------------------

#[tokio::test]
async fn queue_calls_to_a_follower_go_to_the_leader_and_reads_stay() -> TestResult {
    let mut rs = ReplicaSet::new("ha-redirect").await;
    let (l, f) = rs.start_pair().await;
    let (leader, follower) = (&rs.daemons[l], &rs.daemons[f]);
    rs.api.seed("configmaps", "ha-redirect", 3).await?;
    let client = client_of(follower, Duration::from_secs(20));

    // The follower itself refuses, naming the leader (a raw call does not follow).
    let mut raw = client.queues_raw();
    let request = LenRequest {
        queue: "ha-redirect".into(),
    };
    match client.unary("Len", None, request, |r| raw.len(r)).await {
        Err(e @ Error::NotLeader { .. }) => {
            assert!(e.is_transient());
            assert_eq!(e.code(), tonic::Code::Unavailable);
            let Error::NotLeader {
                leader: name,
                leader_address,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(
                (name.as_str(), leader_address.as_str()),
                (leader.identity(), leader.target())
            );
        }
        other => panic!("want NotLeader, got {other:?}"),
    }
    assert_eq!(client.leader_address(), None);

    // Reads are served by the follower.
    let cms = synced_configmaps(
        &client,
        InformerSpec::new("v1", "ConfigMap").namespace("ha-redirect"),
    )
    .await;
    assert!(cms.get("ha-redirect/seed-0000001").await?.is_some());

    // The typed calls follow the leader; the queue's source names an informer the client
    // ensured on the follower, so the client ensures it on the leader too.
    let spec = QueueSpec::new("ha-redirect")?.source(Source::object(&cms));
    client.queues().create(spec).await?;
    assert_eq!(client.leader_address().as_deref(), Some(leader.target()));
    client.queues().add("ha-redirect", ["by-hand"]).await?;
    wait_until(
        HANG,
        "the three objects and the key added by hand",
        || async { queue_state(&client, "ha-redirect").await.depth == 4 },
    )
    .await?;

    let direct = client_of(leader, Duration::from_secs(20));
    assert_eq!(queue_state(&direct, "ha-redirect").await.depth, 4);
    assert_eq!(direct.leader_address(), None, "the leader serves it");
    Ok(())
}

#[tokio::test]
async fn without_a_known_leader_queue_calls_retry_within_their_deadline() -> TestResult {
    // A Lease held by a live holder that advertises no address: the follower answers NOT_LEADER
    // without one, and the client retries on it with backoff until its deadline; once the
    // Lease is gone (and the holder's last lease has run out: it may still have been leading)
    // the daemon leads and a waiting call goes through.
    let mut rs = ReplicaSet::new("ha-noleader").await;
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{HA_NAMESPACE}/leases");
    let lease_path = format!("{leases}/ha-noleader");
    let ghost = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "ha-noleader", "namespace": HA_NAMESPACE},
        "spec": {
            "holderIdentity": "ghost",
            "leaseDurationSeconds": 10,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
        },
    });
    rs.api.request("POST", &leases, Some(&ghost)).await?;
    rs.start(1).await;
    let rs = &rs;
    // The ghost renews every second, as a live leader does (each write is a new
    // resourceVersion: an observed renewal), until the Lease is deleted below.
    let ghost_renews = async {
        loop {
            if let Ok(lease) = rs.api.request("GET", &lease_path, None).await {
                let _ = rs.api.request("PUT", &lease_path, Some(&lease)).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let steps = async {
        let daemon = &rs.daemons[0];
        wait_until(HANG, "the daemon following the ghost", || async {
            replica_info(daemon)
                .await
                .is_some_and(|r| r.role == ReplicaRole::Follower && r.leader == "ghost")
        })
        .await?;

        let client = client_of(daemon, Duration::from_secs(60));
        let started = Instant::now();
        let request = LenRequest {
            queue: "ha-noleader".into(),
        };
        let e = client
            .leader_unary(
                "Len",
                Some(Duration::from_millis(1500)),
                request,
                |mut rpc, r| async move { rpc.len(r).await },
            )
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        match &e {
            Error::NotLeader {
                leader,
                leader_address,
                ..
            } => assert_eq!((leader.as_str(), leader_address.as_str()), ("ghost", "")),
            other => panic!("want NotLeader, got {other:?}"),
        }
        // Retried (the first answer comes at once), and given up within the deadline.
        assert!(
            elapsed > Duration::from_millis(500) && elapsed < Duration::from_secs(10),
            "{elapsed:?}"
        );
        assert_eq!(client.leader_address(), None);

        Ok::<_, Box<dyn std::error::Error>>(client)
    };
    let client = tokio::select! {
        _ = ghost_renews => unreachable!("the renewals loop for ever"),
        client = steps => client?,
    };
    let daemon = &rs.daemons[0];

    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.queues().create(QueueSpec::new("ha-noleader")?).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished());
    rs.api.request("DELETE", &lease_path, None).await?;
    let info = bounded("the waiting create", waiting).await??;
    assert_eq!(info.spec.unwrap_or_default().name, "ha-noleader");
    let replica = client.admin().get_replica().await?;
    assert_eq!(
        (replica.role, replica.identity.as_str()),
        (ReplicaRole::Leader, daemon.identity())
    );
    Ok(())
}

// --- failover under a controller -------------------------------------------------------------

/// Every ReconcileEvent of a controller; its reconcile hangs on the first delivery of one key.
struct Recorder {
    hang_key: String,
    events: Mutex<Vec<ReconcileEvent>>,
    deliveries: Mutex<HashMap<String, usize>>,
}

impl Recorder {
    fn of(&self, kind: fn(&ReconcileEventKind) -> bool, key: Option<&str>) -> Vec<ReconcileEvent> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| kind(&e.kind) && key.is_none_or(|k| e.key == k))
            .cloned()
            .collect()
    }

    /// No key in two reconciles at once (start .. end or cancel), tokens increasing.
    fn assert_no_overlap(&self) {
        let mut open = HashMap::new();
        let mut spans: HashMap<String, Vec<(Instant, Instant, u64)>> = HashMap::new();
        for e in self.events.lock().unwrap().iter() {
            if e.kind == ReconcileEventKind::Start {
                open.insert((e.key.clone(), e.token), e.at);
            } else {
                let start = open
                    .remove(&(e.key.clone(), e.token))
                    .expect("an end of a started reconcile");
                spans
                    .entry(e.key.clone())
                    .or_default()
                    .push((start, e.at, e.token));
            }
        }
        for (key, mut list) in spans {
            list.sort();
            for w in list.windows(2) {
                let ((_, end, token), (start, _, next)) = (w[0], w[1]);
                assert!(
                    start >= end,
                    "{key}: token {next} started before {token} ended"
                );
                assert!(next > token, "{key}: token {next} after {token}");
            }
        }
    }
}

fn is_start(k: &ReconcileEventKind) -> bool {
    *k == ReconcileEventKind::Start
}

fn is_end(k: &ReconcileEventKind) -> bool {
    matches!(k, ReconcileEventKind::End { .. })
}

fn is_cancel(k: &ReconcileEventKind) -> bool {
    *k == ReconcileEventKind::Cancel
}

async fn reconcile(_: Arc<Value>, ctx: Context<Recorder>) -> Result<Action, Error> {
    let n = {
        let mut d = ctx.deliveries.lock().unwrap();
        let n = d.entry(ctx.key().to_string()).or_default();
        *n += 1;
        *n
    };
    if ctx.key() == ctx.hang_key && n == 1 {
        futures::future::pending::<()>().await; // until cancelled
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(Action::await_change())
}

/// A controller connected to the follower, one of its reconciles hung on the leader; then
/// `fail(leader)`. Returns the recorder, when the leader failed and the hung reconcile's start,
/// once every key was reconciled on the new leader and the controller drained.
async fn run_failover(
    rs: &mut ReplicaSet,
    namespace: &str,
    fail: Signal,
) -> (Arc<Recorder>, Instant, ReconcileEvent, usize, usize) {
    let (l, s) = rs.start_pair().await;
    rs.api.seed("configmaps", namespace, 8).await.expect("seed");
    let keys: BTreeSet<String> = (0..8).map(|i| format!("{namespace}/seed-{i:07}")).collect();
    let rec = Arc::new(Recorder {
        hang_key: format!("{namespace}/seed-0000003"),
        events: Mutex::new(Vec::new()),
        deliveries: Mutex::new(HashMap::new()),
    });
    let client = client_of(&rs.daemons[s], Duration::from_secs(10));
    let observer = rec.clone();
    let ctl = Controller::<Value>::for_kind(client.clone(), namespace, "v1", "ConfigMap")
        .namespace(namespace)
        .concurrency(3)
        .on_reconcile(move |e| observer.events.lock().unwrap().push(e.clone()));
    let stop = ctl.shutdown_token();
    let task = tokio::spawn(ctl.run(
        reconcile,
        |_, _, _| Action::requeue_rate_limited(),
        rec.clone(),
    ));

    wait_until(HANG, "the hung reconcile", || {
        let started = !rec.of(is_start, Some(&rec.hang_key)).is_empty();
        async move { started }
    })
    .await
    .expect("the hung reconcile starts");
    let hung = rec.of(is_start, Some(&rec.hang_key)).remove(0);
    assert_eq!(
        client.leader_address().as_deref(),
        Some(rs.daemons[l].target())
    );
    let lead = replica_info(&rs.daemons[l])
        .await
        .expect("the leader answers");
    assert_eq!(hung.epoch, lead.token_epoch);
    assert!(hung.token > hung.epoch);
    assert!(!hung.stream_id.is_empty());

    let failed_at = Instant::now();
    match fail {
        Signal::Stop => assert!(rs.daemons[l].signal(Signal::Stop)),
        other => {
            rs.daemons[l].stop(other).await;
        }
    }

    wait_until(
        Duration::from_secs(90),
        "every key reconciled on the new leader",
        || {
            let done: BTreeSet<String> = rec
                .of(is_end, None)
                .into_iter()
                .filter(|e| e.epoch > hung.epoch)
                .map(|e| e.key)
                .collect();
            let all = done.is_superset(&keys);
            async move { all }
        },
    )
    .await
    .expect("the controller goes on on the new leader");
    let new = client.admin().get_replica().await.expect("GetReplica");
    assert_eq!(
        (new.role, new.identity.as_str()),
        (ReplicaRole::Leader, rs.daemons[s].identity())
    );
    assert!(new.lease_transitions > lead.lease_transitions);
    assert!(new.token_epoch > lead.token_epoch);
    let epochs: BTreeSet<u64> = rec
        .of(is_end, None)
        .iter()
        .filter(|e| e.epoch > hung.epoch)
        .map(|e| e.epoch)
        .collect();
    assert_eq!(epochs, BTreeSet::from([new.token_epoch]));
    // The survivor is the configured target: nothing to follow any more.
    assert_eq!(client.leader_address(), None);
    queue_idle(&client, namespace).await;
    stop.cancel();
    bounded("the drained controller", task)
        .await
        .expect("the controller task")
        .expect("the controller returns Ok after its drain");
    rec.assert_no_overlap();
    // Outcomes of the broken stream were never sent on the new one: nothing refused.
    assert_eq!(
        sample("informerd_sdk_work_refusals_total", namespace, &[]),
        0.0
    );
    (rec, failed_at, hung, l, s)
}

#[tokio::test]
async fn killing_the_leader_cancels_its_reconciles_at_once_and_work_goes_on() -> TestResult {
    let mut rs = ReplicaSet::new("ha-kill").await;
    let (rec, killed_at, hung, _, _) = run_failover(&mut rs, "ha-kill", Signal::Kill).await;
    let cancels: Vec<ReconcileEvent> = rec
        .of(is_cancel, Some(&rec.hang_key))
        .into_iter()
        .filter(|e| e.token == hung.token)
        .collect();
    let [cancel] = &cancels[..] else {
        panic!("one cancel of the hung reconcile: {cancels:?}");
    };
    let after = cancel.at.duration_since(killed_at);
    eprintln!("reconcile cancelled {after:?} after the SIGKILL");
    assert!(after < Duration::from_secs(5), "{after:?}");
    assert_eq!(cancel.epoch, hung.epoch);
    // Every reconcile in flight when the stream broke was cancelled; none ended after it.
    assert!(
        rec.of(is_end, None)
            .iter()
            .all(|e| e.epoch != hung.epoch || e.at <= cancel.at)
    );
    let again: Vec<ReconcileEvent> = rec
        .of(is_start, Some(&rec.hang_key))
        .into_iter()
        .filter(|e| e.epoch > hung.epoch)
        .collect();
    assert!(!again.is_empty());
    assert!(again[0].token > hung.token);
    Ok(())
}

#[tokio::test]
async fn a_frozen_leader_is_left_by_keepalive_and_follows_when_it_resumes() -> TestResult {
    let mut rs = ReplicaSet::new("ha-stop").await;
    let (rec, frozen_at, hung, old, survivor) =
        run_failover(&mut rs, "ha-stop", Signal::Stop).await;
    let cancel = rec
        .of(is_cancel, Some(&rec.hang_key))
        .into_iter()
        .find(|e| e.token == hung.token)
        .expect("the hung reconcile cancelled");
    // Nothing but the client's keepalive (a ping every 2 s, 2 s to answer) notices a stopped
    // process: TCP alone would take minutes.
    let after = cancel.at.duration_since(frozen_at);
    eprintln!("reconcile cancelled {after:?} after the SIGSTOP");
    assert!(after < Duration::from_secs(10), "{after:?}");

    assert!(rs.daemons[old].signal(Signal::Cont));
    let survivor = rs.daemons[survivor].identity().to_string();
    let old = &rs.daemons[old];
    wait_until(HANG, "the resumed leader following the new one", || async {
        replica_info(old)
            .await
            .is_some_and(|r| r.role == ReplicaRole::Follower && r.leader == survivor)
    })
    .await?;
    Ok(())
}
