//! Queues: create (idempotent, conflicting), update, the client-side calls, bad names.
use std::time::Duration;

use informerd::{ErrorReason, InformerSpec, Predicate, QueueSpec, RateLimiter, Source};
use tonic::Code;

use crate::common::*;

#[tokio::test]
async fn create_is_idempotent_and_another_spec_conflicts() -> TestResult {
    let env = env().await;
    let (api, client) = (&env.api, &env.client);
    api.seed("configmaps", "q-create", 5).await?;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("q-create"),
    )
    .await;
    let queues = client.queues();
    let spec = QueueSpec::new("q-create")?
        .source(
            Source::object(&cms)
                .predicate(Predicate::annotations_changed())
                .predicate(Predicate::fields_changed(["data"])?),
        )
        .rate_limiter(RateLimiter::fast_slow(5, 1000, 3)?);
    let info = queues.create(spec).await?;
    assert_eq!(info.spec.as_ref().unwrap().name, "q-create");
    // The same intent in another order is the same spec: a no-op.
    let again = QueueSpec::new("q-create")?
        .source(
            Source::object(cms.id())
                .predicate(Predicate::fields_changed(["data"])?)
                .predicate(Predicate::annotations_changed()),
        )
        .rate_limiter(RateLimiter::fast_slow(5, 1000, 3)?);
    assert_eq!(queues.create(again).await?.spec, info.spec);
    let e = queues
        .create(QueueSpec::new("q-create")?.source(Source::object(&cms)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(
        e.reason(),
        Some(ErrorReason::QueueExistsWithOtherSpec),
        "{e}"
    );

    // The object source enqueues every cached object.
    informerd::testing::wait_until(HANG, "the source enqueued the 5 objects", || {
        let queues = queues.clone();
        async move { queues.len("q-create").await.ok() == Some(5) }
    })
    .await?;

    // update changes the spec in place; allow_missing creates.
    let plain = QueueSpec::new("q-create")?.source(Source::object(&cms));
    let updated = queues.update(plain.clone(), false).await?;
    assert_eq!(updated.spec, Some(plain.canonical()?));
    let e = queues
        .update(QueueSpec::new("q-missing")?, false)
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    queues.update(QueueSpec::new("q-missing")?, true).await?;
    assert_eq!(
        queues.get("q-missing").await?.spec.unwrap().name,
        "q-missing"
    );
    queues.delete("q-missing").await?;
    assert!(queues.get("q-missing").await.unwrap_err().is_not_found());
    Ok(())
}

#[tokio::test]
async fn adds_retries_forget_and_shutdown() -> TestResult {
    let env = env().await;
    let client = &env.client;
    let q = client.queues();
    q.create(QueueSpec::new("q-adds")?.rate_limiter(RateLimiter::exponential(1000, 60_000)?))
        .await?;
    q.add("q-adds", ["a", "b", "a"]).await?;
    assert_eq!(q.len("q-adds").await?, 2);
    q.add_after("q-adds", ["c"], Duration::from_secs(3600))
        .await?;
    assert_eq!(q.len("q-adds").await?, 2);
    assert_eq!(q.get("q-adds").await?.state.unwrap().delayed, 1);
    q.add_rate_limited("q-adds", ["d"]).await?;
    q.add_rate_limited("q-adds", ["d"]).await?;
    assert_eq!(q.num_requeues("q-adds", "d").await?, 2);
    q.forget("q-adds", ["d"]).await?;
    assert_eq!(q.num_requeues("q-adds", "d").await?, 0);
    q.shut_down("q-adds", true).await?;
    assert!(q.get("q-adds").await?.state.unwrap().shutting_down);
    q.delete("q-adds").await?;
    assert!(q.len("q-adds").await.unwrap_err().is_not_found());
    Ok(())
}

#[tokio::test]
async fn bad_names_and_keys_are_refused_naming_them() -> TestResult {
    let env = env().await;
    let client = &env.client;
    let q = client.queues();
    assert_eq!(q.add("Q!", ["a"]).await.unwrap_err().field(), Some("queue"));
    assert_eq!(q.len("").await.unwrap_err().field(), Some("queue"));
    assert_eq!(q.delete("-x").await.unwrap_err().field(), Some("queue"));
    assert_eq!(
        QueueSpec::new("Bad_Name").unwrap_err().field(),
        Some("QueueSpec.name")
    );
    q.create(QueueSpec::new("q-bad")?).await?;
    assert_eq!(
        q.add("q-bad", [""]).await.unwrap_err().field(),
        Some("keys")
    );
    assert_eq!(
        q.num_requeues("q-bad", &"k".repeat(2000))
            .await
            .unwrap_err()
            .field(),
        Some("keys")
    );
    // A source on an informer the daemon does not run.
    let e = q
        .create(QueueSpec::new("q-ghost")?.source(Source::object("no-such-informer")))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::InformerNotFound), "{e}");
    // A queue that does not exist.
    let e = q.add("q-none", ["a"]).await.unwrap_err();
    assert_eq!(e.reason(), Some(ErrorReason::QueueNotFound), "{e}");
    Ok(())
}

#[tokio::test]
async fn remembered_specs_come_back_after_a_restart() -> TestResult {
    let mut env = env().await;
    let client = env.client.clone();
    client
        .queues()
        .create(QueueSpec::new("q-restart")?.resync_period(Duration::from_secs(5)))
        .await?;
    env.daemon.restart(informerd::testing::Signal::Term).await?;
    // A restart forgets queues (the first calls may fail while the channel reconnects).
    informerd::testing::wait_until(
        HANG,
        "the restarted daemon says the queue is not found",
        || {
            let queues = client.queues();
            async move {
                queues
                    .get("q-restart")
                    .await
                    .is_err_and(|e| e.is_not_found())
            }
        },
    )
    .await?;
    informerd::testing::wait_until(HANG, "reensure succeeds", || {
        let client = client.clone();
        async move { client.reensure().await.is_ok() }
    })
    .await?;
    assert_eq!(
        client
            .queues()
            .get("q-restart")
            .await?
            .spec
            .unwrap()
            .resync_period_ms,
        5000
    );
    Ok(())
}

#[tokio::test]
async fn admin_lists_the_clusters_informers_and_queues_with_their_workers() -> TestResult {
    let env = env().await;
    let client = &env.client;
    let cms = synced_configmaps(
        client,
        InformerSpec::new("v1", "ConfigMap").namespace("q-admin"),
    )
    .await;
    client
        .queues()
        .create(QueueSpec::new("q-admin")?.source(Source::object(&cms)))
        .await?;
    let admin = client.admin();
    let clusters = admin.clusters().await?;
    assert_eq!(
        clusters.iter().filter(|c| c.is_default).count(),
        1,
        "{clusters:?}"
    );
    let informers = admin.informers().await?;
    assert!(informers.iter().any(|i| i.id == cms.id()), "{informers:?}");
    let queues = admin.queues().await?;
    let q = queues
        .iter()
        .find(|q| {
            q.queue
                .as_ref()
                .and_then(|i| i.spec.as_ref())
                .map(|s| s.name.as_str())
                == Some("q-admin")
        })
        .expect("q-admin listed");
    assert!(q.workers.is_empty(), "no Work stream yet: {q:?}");
    Ok(())
}
