//! The examples (their own files, as modules here and as the built program) on a real
//! kube-apiserver with a real informerd: what sdk/python/tests/test_examples.py checks of the
//! Python twins. One kube-apiserver serves every scenario (it takes a while to start), each in
//! its own namespace with its own daemon.
// Each example is a program of its own with the shared `common` module: loading two of them
// loads it twice.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/configmap_hash.rs"]
mod configmap_hash;
#[path = "../examples/crd_finalizer.rs"]
mod crd_finalizer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use informerd::testing::{Daemon, KubeApiServer, Pki, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const DEADLINE: Duration = Duration::from_secs(60);

async fn namespace(kube: &kube::Client, name: &str) -> kube::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map(drop)
}

/// Server-side apply of `intent` (a full object) as the test's field manager.
async fn apply<K>(api: &Api<K>, intent: Value) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = intent["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(
        &name,
        &PatchParams::apply("examples-test").force(),
        &Patch::Apply(intent),
    )
    .await
}

/// Waits until `check` (an async condition that may fail) holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<bool>>,
{
    wait_until(DEADLINE, what, || {
        let f = check();
        async move { f.await.unwrap_or(false) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn the_examples_on_a_real_kube_apiserver() -> TestResult {
    let server = KubeApiServer::start(Duration::from_secs(180)).await?;
    let kube = common::kube_client(server.kubeconfig()).await?;
    configmap_hash_stamps_exactly_the_deployments_that_mount_a_changed_configmap(&server, &kube)
        .await?;
    crd_finalizer_adds_writes_status_and_cleans_up(&server, &kube).await?;
    crd_finalizer_runs_as_a_program_and_drains_on_sigterm(&server, &kube).await?;
    the_examples_run_as_programs_with_authentication_on(&server, &kube).await?;
    kube_helpers_conflict_instead_of_clobbering(&kube).await?;
    Ok(())
}

fn deployment(name: &str, configmaps: &[&str]) -> Value {
    let volumes: Vec<Value> = configmaps
        .iter()
        .map(|cm| json!({"name": format!("v-{cm}"), "configMap": {"name": cm}}))
        .collect();
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example/app:1"}],
                    "volumes": volumes,
                },
            },
        },
    })
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

fn hash_of(d: &Deployment) -> Option<String> {
    d.spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(configmap_hash::ANNOTATION))
        .cloned()
}

async fn configmap_hash_stamps_exactly_the_deployments_that_mount_a_changed_configmap(
    server: &KubeApiServer,
    kube: &kube::Client,
) -> TestResult {
    let ns = "hash";
    namespace(kube, ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), ns);
    apply(&cms, configmap("cm-a", "1")).await?;
    apply(&cms, configmap("cm-b", "1")).await?;
    let names = ["d-a", "d-b", "d-ab", "d-none"];
    let mounts: [&[&str]; 4] = [&["cm-a"], &["cm-b"], &["cm-a", "cm-b"], &[]];
    for (name, mounted) in names.iter().zip(mounts) {
        apply(&deployments, deployment(name, mounted)).await?;
    }
    let daemon = Daemon::start(server.kubeconfig()).await?;
    let (controller, state) =
        configmap_hash::controller(daemon.client()?, kube.clone(), ns).await?;
    let stop = controller.shutdown_token();
    let task = tokio::spawn(configmap_hash::run(controller, state.clone()));

    // Each Deployment was reconciled at its current generation (after our own write).
    let settled = |names: &'static [&'static str]| {
        let (deployments, state) = (deployments.clone(), state.clone());
        async move {
            for name in names {
                let d = deployments.get(name).await?;
                let generation = d.metadata.generation.unwrap_or_default();
                let reconciled = state.reconciled.lock().unwrap();
                if !reconciled
                    .get(&format!("{ns}/{name}"))
                    .is_some_and(|g| g.contains(&generation))
                {
                    return Ok(false);
                }
            }
            Ok::<_, kube::Error>(true)
        }
    };
    let hashes = || async {
        let mut out = BTreeMap::new();
        for name in names {
            out.insert(name, hash_of(&deployments.get(name).await?));
        }
        Ok::<_, kube::Error>(out)
    };
    eventually(
        "every Deployment that mounts a ConfigMap is annotated",
        || async {
            let h = hashes().await?;
            Ok(["d-a", "d-b", "d-ab"].iter().all(|n| h[n].is_some())
                && settled(&["d-a", "d-b", "d-ab", "d-none"]).await?)
        },
    )
    .await;
    let before = hashes().await?;
    assert_eq!(before["d-none"], None);
    let distinct: std::collections::BTreeSet<_> =
        ["d-a", "d-b", "d-ab"].iter().map(|n| &before[n]).collect();
    assert_eq!(distinct.len(), 3, "{before:?}");
    // Our own write bumped each generation once; the reconcile at the new one wrote nothing.
    for name in ["d-a", "d-b", "d-ab"] {
        assert_eq!(deployments.get(name).await?.metadata.generation, Some(2));
    }
    // The hash is the Python example's, of the objects as the API server has them.
    let json_of = |cm: ConfigMap| serde_json::to_value(cm).map(Some);
    let expected = configmap_hash::configmaps_hash(&[
        ("cm-a".into(), json_of(cms.get("cm-a").await?)?),
        ("cm-b".into(), json_of(cms.get("cm-b").await?)?),
    ]);
    assert_eq!(before["d-ab"].as_deref(), Some(expected.as_str()));

    // Changing cm-a re-annotates d-a and d-ab, and leaves d-b alone.
    let d_b = deployments.get("d-b").await?;
    let d_b_reconciles = state.reconciled.lock().unwrap()[&format!("{ns}/d-b")].clone();
    apply(&cms, configmap("cm-a", "2")).await?;
    eventually("d-a and d-ab carry the new hash", || async {
        let h = hashes().await?;
        Ok(h["d-a"] != before["d-a"]
            && h["d-ab"] != before["d-ab"]
            && settled(&["d-a", "d-ab"]).await?)
    })
    .await;
    let after = hashes().await?;
    assert_eq!(after["d-b"], before["d-b"]);
    assert_eq!(after["d-none"], None);
    assert_eq!(
        state.reconciled.lock().unwrap()[&format!("{ns}/d-b")],
        d_b_reconciles
    );
    assert_eq!(
        deployments.get("d-b").await?.resource_version(),
        d_b.resource_version()
    );
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await???;
    Ok(())
}

fn widget(name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "example.informerd.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    })
}

async fn observed(
    api: &Api<crd_finalizer::Widget>,
    name: &str,
    generation: i64,
) -> kube::Result<bool> {
    let w = api.get(name).await?;
    Ok(w.status.and_then(|s| s.observed_generation) == Some(generation))
}

async fn crd_finalizer_adds_writes_status_and_cleans_up(
    server: &KubeApiServer,
    kube: &kube::Client,
) -> TestResult {
    let ns = "widgets";
    namespace(kube, ns).await?;
    crd_finalizer::install_crd(kube).await?;
    let widgets: Api<crd_finalizer::Widget> = Api::namespaced(kube.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let inventory = || async {
        match cms.get_opt(crd_finalizer::INVENTORY).await? {
            Some(cm) => Ok::<_, kube::Error>(cm.data.unwrap_or_default()),
            None => Ok(BTreeMap::new()),
        }
    };
    let expect = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let daemon = Daemon::start(server.kubeconfig()).await?;
    let (controller, state) = crd_finalizer::controller(daemon.client()?, kube.clone(), ns);
    // One at a time: the queue hands keys out in order, so once a later key was reconciled,
    // any re-trigger of an earlier one would have been seen.
    let controller = controller.concurrency(1);
    let stop = controller.shutdown_token();
    let task = tokio::spawn(crd_finalizer::run(controller, state.clone()));

    apply(&widgets, widget("w1", 3)).await?;
    eventually("w1's status observes generation 1", || {
        observed(&widgets, "w1", 1)
    })
    .await;
    let w1 = widgets.get("w1").await?;
    assert_eq!(w1.finalizers(), [crd_finalizer::FINALIZER]);
    let status = w1.status.unwrap();
    let [ready] = &status.conditions[..] else {
        panic!("one condition: {:?}", status.conditions);
    };
    assert_eq!(
        (
            ready.type_.as_str(),
            ready.status.as_str(),
            ready.reason.as_str()
        ),
        ("Ready", "True", "Provisioned")
    );
    assert_eq!(ready.observed_generation, Some(1));
    assert_eq!(inventory().await?, expect(&[("w1", "3")]));

    apply(&widgets, widget("w1", 5)).await?;
    eventually("w1's status observes generation 2", || {
        observed(&widgets, "w1", 2)
    })
    .await;
    assert_eq!(inventory().await?, expect(&[("w1", "5")]));
    apply(&widgets, widget("w2", 1)).await?;
    eventually("w2's status observes generation 1", || {
        observed(&widgets, "w2", 1)
    })
    .await;
    // Neither the finalizer nor the status writes woke the controller again: w1 was
    // reconciled once per generation.
    let w1_key = format!("{ns}/w1");
    assert_eq!(state.reconciled.lock().unwrap()[&w1_key], [1, 2]);
    assert_eq!(
        state.events.lock().unwrap()[&w1_key],
        ["applied", "applied"]
    );
    assert_eq!(inventory().await?, expect(&[("w1", "5"), ("w2", "1")]));

    // Deletion: the finalizer holds w1 until its inventory entry is gone.
    widgets.delete("w1", &DeleteParams::default()).await?;
    eventually("w1 is deleted", || async {
        Ok(widgets.get_opt("w1").await?.is_none())
    })
    .await;
    assert_eq!(inventory().await?, expect(&[("w2", "1")]));
    assert_eq!(
        state.events.lock().unwrap()[&w1_key].last(),
        Some(&"cleaned_up")
    );
    assert!(!widgets.get("w2").await?.finalizers().is_empty());
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await???;
    Ok(())
}

/// The example programs `cargo test` builds, next to this test's binary.
fn example_program(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test --all-features` builds the examples (or `cargo build \
         --features kube --example {name}`)",
        path.display()
    );
    path
}

/// The example program `name` on informerd at `target` (with `connection`'s flags: its CA and
/// credential) and the kube-apiserver, for namespace `ns`, its output into `log`.
fn spawn_example(
    name: &str,
    target: &str,
    connection: &[String],
    server: &KubeApiServer,
    ns: &str,
    log: &tempfile::NamedTempFile,
) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(example_program(name))
        .arg("--target")
        .arg(target)
        .args(connection)
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .arg(format!("--namespace={ns}"))
        .stdin(Stdio::null())
        .stdout(log.reopen()?)
        .stderr(log.reopen()?)
        .kill_on_drop(true)
        .spawn()
}

/// SIGTERM to `program`, which must drain and exit 0; its output.
async fn drained(
    mut program: tokio::process::Child,
    log: &tempfile::NamedTempFile,
    what: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let pid = program.id().expect("running") as libc::pid_t;
    // SAFETY: kill(2) on the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(DEADLINE, program.wait()).await??;
    let output = std::fs::read_to_string(log.path())?;
    assert!(status.success(), "{what}: {status}: {output}");
    assert!(output.contains("SIGTERM: draining"), "{what}: {output}");
    Ok(output)
}

async fn crd_finalizer_runs_as_a_program_and_drains_on_sigterm(
    server: &KubeApiServer,
    kube: &kube::Client,
) -> TestResult {
    let ns = "widgets-main";
    namespace(kube, ns).await?;
    let daemon = Daemon::start(server.kubeconfig()).await?;
    let log = tempfile::NamedTempFile::new()?;
    let program = spawn_example("crd_finalizer", daemon.target(), &[], server, ns, &log)?;
    let widgets: Api<crd_finalizer::Widget> = Api::namespaced(kube.clone(), ns);
    // The program installs the CRD (the scenario before did too: it is served already).
    apply(&widgets, widget("from-main", 2)).await?;
    eventually("the program reconciled the Widget", || {
        observed(&widgets, "from-main", 1)
    })
    .await;
    let output = drained(program, &log, "crd_finalizer").await?;
    assert!(output.contains("work stream drained"), "{output}");
    Ok(())
}

/// What an example needs of informerd, for `subject` (an RBAC subject): reading its resources
/// in `ns` (list and watch) and working its queue, the least a user binds for it.
async fn grant_example(kube: &kube::Client, ns: &str, subject: Value, queue: &str) -> TestResult {
    let reader = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "example-reader", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
            {"apiGroups": ["example.informerd.io"], "resources": ["widgets"], "verbs": ["list", "watch"]},
        ],
    });
    apply(&Api::<Role>::namespaced(kube.clone(), ns), reader).await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "example-reader", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "example-reader"},
        "subjects": [subject.clone()],
    });
    apply(&Api::<RoleBinding>::namespaced(kube.clone(), ns), binding).await?;
    // informerd reviews queues with namespace "": a ClusterRoleBinding, limited by name.
    let name = format!("example-{ns}");
    let queue_role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["informerd.io"], "resources": ["queues"], "resourceNames": [queue],
                   "verbs": ["get", "work", "update", "create"]}],
    });
    apply(&Api::<ClusterRole>::all(kube.clone()), queue_role).await?;
    let queue_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [subject],
    });
    apply(&Api::<ClusterRoleBinding>::all(kube.clone()), queue_binding).await?;
    Ok(())
}

/// A token of service account `ns/name` (created here), from the TokenRequest API.
async fn service_account_token(kube: &kube::Client, ns: &str, name: &str) -> kube::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(kube.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    accounts.create(&PostParams::default(), &account).await?;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    Ok(issued.status.and_then(|s| s.token).unwrap_or_default())
}

/// Each example as a program, as its README runs it against informerd's default (authentication
/// on): over TLS with a service account's token file, and with a client certificate, bound to
/// what it needs; it reconciles, and exits 0 on SIGTERM after draining. The Rust twin of
/// test_examples.py's test of the same name.
async fn the_examples_run_as_programs_with_authentication_on(
    server: &KubeApiServer,
    kube: &kube::Client,
) -> TestResult {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path().join("pki"))?;
    let ca = pki.ca("ca")?;
    let serving = pki.server_cert("server", &ca, &["127.0.0.1"], &["localhost"])?;
    let client_ca = pki.ca("client-ca")?;
    let daemon = Daemon::start_with(
        server.kubeconfig(),
        &[
            &format!("--tls-cert={}", serving.cert.display()),
            &format!("--tls-key={}", serving.key.display()),
            &format!("--tls-client-ca={}", client_ca.cert.display()),
        ],
    )
    .await?;
    // Authentication is on: a caller with the CA but no credential is refused.
    let anonymous = informerd::Client::connect(
        informerd::ConnectOptions::new(daemon.target()).ca_pem(std::fs::read(&ca.cert)?),
    )?;
    let refused = anonymous
        .informers()
        .ensure(informerd::InformerSpec::new("v1", "ConfigMap").namespace("default"))
        .await
        .expect_err("informerd served a caller without credentials");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");

    for (example, queue) in [
        ("crd_finalizer", crd_finalizer::NAME),
        ("configmap_hash", configmap_hash::NAME),
    ] {
        for credential in ["token", "mtls"] {
            let ns = format!("secure-{}-{credential}", example.replace('_', "-"));
            namespace(kube, &ns).await?;
            let (subject, flags) = if credential == "token" {
                let token = dir.path().join(format!("{ns}.token"));
                std::fs::write(&token, service_account_token(kube, &ns, "example").await?)?;
                (
                    json!({"kind": "ServiceAccount", "name": "example", "namespace": ns}),
                    vec!["--token-file".to_string(), token.display().to_string()],
                )
            } else {
                let user = format!("example-{ns}");
                let cert = pki.client_cert(&user, &client_ca, &user, &[])?;
                (
                    json!({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}),
                    vec![
                        "--cert-file".to_string(),
                        cert.cert.display().to_string(),
                        "--key-file".to_string(),
                        cert.key.display().to_string(),
                    ],
                )
            };
            grant_example(kube, &ns, subject, queue).await?;
            let log = tempfile::NamedTempFile::new()?;
            let mut connection = vec!["--ca-file".to_string(), ca.cert.display().to_string()];
            connection.extend(flags);
            let program = spawn_example(example, daemon.target(), &connection, server, &ns, &log)?;
            if example == "crd_finalizer" {
                let widgets: Api<crd_finalizer::Widget> = Api::namespaced(kube.clone(), &ns);
                apply(&widgets, widget("secure", 1)).await?;
                eventually(
                    &format!("{example} ({credential}) reconciled the Widget"),
                    || observed(&widgets, "secure", 1),
                )
                .await;
            } else {
                apply(
                    &Api::<ConfigMap>::namespaced(kube.clone(), &ns),
                    configmap("cm", "1"),
                )
                .await?;
                let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
                apply(&deployments, deployment("d", &["cm"])).await?;
                eventually(
                    &format!("{example} ({credential}) annotated the Deployment"),
                    || {
                        let deployments = deployments.clone();
                        async move { Ok(hash_of(&deployments.get("d").await?).is_some()) }
                    },
                )
                .await;
            }
            drained(program, &log, &format!("{example} ({credential})")).await?;
        }
    }
    Ok(())
}

/// The finalizer and status helpers on stale objects: their writes `test` what was read, so a
/// change since makes them conflict instead of clobbering it.
async fn kube_helpers_conflict_instead_of_clobbering(kube: &kube::Client) -> TestResult {
    use informerd::kube::{Event, StatusPatch, finalizer, is_conflict, patch_status};
    use std::sync::{Arc, Mutex};
    let ns = "helpers";
    namespace(kube, ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let set_finalizers = |list: Value| {
        let cms = cms.clone();
        async move {
            let patch = Patch::Merge(json!({"metadata": {"finalizers": list}}));
            cms.patch("cm", &PatchParams::default(), &patch).await
        }
    };
    let fin = "example.com/cleanup";

    // No finalizers when read; another writer added one since: ours is not added over it.
    let stale = apply(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
    )
    .await?;
    set_finalizers(json!(["other.io/a"])).await?;
    let ran = Arc::new(Mutex::new(Vec::new()));
    let record = |ran: Arc<Mutex<Vec<String>>>| {
        move |e: Event<ConfigMap>| async move {
            let (what, obj) = match e {
                Event::Apply(o) => ("apply", o),
                Event::Cleanup(o) => ("cleanup", o),
            };
            ran.lock()
                .unwrap()
                .push(format!("{what} {:?}", obj.finalizers()));
            Ok::<_, std::io::Error>(informerd::Action::requeue(Duration::from_secs(7)))
        }
    };
    let e = finalizer(&cms, fin, Arc::new(stale), record(ran.clone()))
        .await
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    // A list when read, changed since: the same.
    let stale = cms.get("cm").await?;
    set_finalizers(json!(["other.io/a", "other.io/b"])).await?;
    let e = finalizer(&cms, fin, Arc::new(stale), record(ran.clone()))
        .await
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(
        cms.get("cm").await?.finalizers(),
        ["other.io/a", "other.io/b"]
    );
    assert!(
        ran.lock().unwrap().is_empty(),
        "no reconcile after a failed write"
    );

    // Fresh: added, and the apply sees the object as the write returned it.
    let action = finalizer(
        &cms,
        fin,
        Arc::new(cms.get("cm").await?),
        record(ran.clone()),
    )
    .await?;
    assert_eq!(action, informerd::Action::requeue(Duration::from_secs(7)));
    assert_eq!(
        ran.lock().unwrap().as_slice(),
        [format!("apply {:?}", ["other.io/a", "other.io/b", fin])]
    );
    // Deleting, read with ours at index 2; another finalizer removed since: the index test fails.
    cms.delete("cm", &DeleteParams::default()).await?;
    let deleting = cms.get("cm").await?;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    set_finalizers(json!(["other.io/b", fin])).await?;
    let e = finalizer(&cms, fin, Arc::new(deleting), record(ran.clone()))
        .await
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(cms.get("cm").await?.finalizers(), ["other.io/b", fin]);
    // (The cleanup ran before the removal failed: cleanups must be idempotent.)
    assert_eq!(ran.lock().unwrap().len(), 2);
    // Fresh: cleaned up, ours removed, the other kept.
    ran.lock().unwrap().clear();
    finalizer(
        &cms,
        fin,
        Arc::new(cms.get("cm").await?),
        record(ran.clone()),
    )
    .await?;
    assert_eq!(
        ran.lock().unwrap().as_slice(),
        [format!("cleanup {:?}", ["other.io/b", fin])]
    );
    assert_eq!(cms.get("cm").await?.finalizers(), ["other.io/b"]);
    // Deleting without ours: nothing runs.
    ran.lock().unwrap().clear();
    let action = finalizer(
        &cms,
        fin,
        Arc::new(cms.get("cm").await?),
        record(ran.clone()),
    )
    .await?;
    assert_eq!(action, informerd::Action::await_change());
    assert!(ran.lock().unwrap().is_empty());
    set_finalizers(Value::Null).await?;

    // A conditional status merge patch at a stale resourceVersion conflicts.
    let widgets: Api<crd_finalizer::Widget> = Api::namespaced(kube.clone(), ns);
    let w = apply(&widgets, widget("w", 1)).await?;
    let rv = w.resource_version().unwrap();
    let status = json!({"observedGeneration": 1});
    let merge = StatusPatch::merge().field_manager("helpers-test");
    let written =
        patch_status(&widgets, "w", &status, &merge.clone().resource_version(&rv)).await?;
    assert_eq!(written.status.unwrap().observed_generation, Some(1));
    let e = patch_status(&widgets, "w", &status, &merge.resource_version(rv))
        .await
        .unwrap_err();
    assert!(is_conflict(&e), "{e}");
    Ok(())
}
