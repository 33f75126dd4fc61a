"""Authentication and authorization end to end, on the real kube-apiserver (issue 13).

One kube-apiserver (testing/kube: RBAC, TokenReview, SubjectAccessReview, TokenRequest) and one
informerd with authentication on — TLS, client certificates from its own client CA, short decision
caches — serve every test of this module; the limits test starts a second informerd with small
per-caller limits. Callers are service accounts (tokens from TokenRequest), the testing server's
static users (admin, unprivileged) and client certificates (CN = user, O = group). The last test
stops the API server (SIGSTOP) and must stay last: the others need it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import secrets
import signal
import statistics
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import pytest
from kubernetes_asyncio import config as kube_config

import informerd
from informerd import kube
from informerd.testing import Daemon, KubeApiServer, eventually
from informerd.testing.pki import KeyPair, Pki, jwt_parts, sign_jwt
from tests.rbac import (
    binding,
    configmap,
    group,
    kubeconfig_token,
    namespace,
    role,
    sa_token,
    service_account,
    user,
)

# The decision caches of the module's daemon: short, so revocation and outage are quick to see.
TTL_S = 2.0
REVIEW_TIMEOUT_S = 1.0
DAEMON_CONFIG = f"""
authentication: {{cacheTTL: {TTL_S:g}s}}
authorization: {{allowTTL: {TTL_S:g}s, denyTTL: {TTL_S:g}s, reviewTimeout: {REVIEW_TIMEOUT_S:g}s}}
"""
FLOOD_WORKER = Path(__file__).parent / "workers" / "caller_flood.py"

A_CONFIGMAPS = {"a/x", "a/x2"}
B_CONFIGMAPS = {"b/y"}


@dataclass
class Env:
    kube: KubeApiServer
    daemon: Daemon
    pki: Pki
    ca: KeyPair  # signs the daemon's serving certificate (clients trust it)
    client_ca: KeyPair  # the daemon's --tls_client_ca
    other_ca: KeyPair  # a CA the daemon does not trust
    tls_args: list[str]
    admin_token: str  # the testing server's admin (system:masters)
    unprivileged_token: str  # a user without any RBAC binding


async def _seed(kube_server: KubeApiServer) -> None:
    api = await kube_config.new_client_from_config(config_file=str(kube_server.kubeconfig))
    try:
        await kube.apply_manifest(
            api,
            [
                namespace("a"),
                namespace("b"),
                configmap("a", "x"),
                configmap("a", "x2"),
                configmap("b", "y"),
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "s", "namespace": "a"},
                    "stringData": {"password": "hunter2"},
                },
                # Reading ConfigMaps through informerd needs list and watch.
                role("a", "cm-reader", ["configmaps"]),
                role("b", "cm-reader", ["configmaps"]),
            ],
        )
    finally:
        await api.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    d = tmp_path_factory.mktemp("auth")
    pki = Pki(d / "pki")
    ca = pki.ca("ca")
    server = pki.server_cert("server", ca)
    client_ca = pki.ca("client-ca")
    other_ca = pki.ca("other-ca")
    tls_args = [
        f"--tls_cert={server.cert}",
        f"--tls_key={server.key}",
        f"--tls_client_ca={client_ca.cert}",
    ]
    with KubeApiServer.start(d / "kube") as kube_server:
        asyncio.run(_seed(kube_server))
        # The daemon's own credentials: the admin kubeconfig (it makes the reviews too).
        (d / "daemon").mkdir()
        with Daemon.start(
            kube_server.kubeconfig,
            d / "daemon",
            config_yaml=DAEMON_CONFIG,
            extra_args=tls_args,
            insecure=False,
        ) as daemon:
            yield Env(
                kube=kube_server,
                daemon=daemon,
                pki=pki,
                ca=ca,
                client_ca=client_ca,
                other_ca=other_ca,
                tls_args=tls_args,
                admin_token=kubeconfig_token(kube_server.kubeconfig),
                unprivileged_token=kubeconfig_token(kube_server.unprivileged_kubeconfig),
            )


@pytest.fixture
async def kapi(env: Env) -> AsyncIterator[Any]:
    """A kubernetes_asyncio ApiClient with the admin's credentials."""
    api = await kube_config.new_client_from_config(config_file=str(env.kube.kubeconfig))
    try:
        yield api
    finally:
        await api.close()


class Connect(Protocol):
    def __call__(
        self,
        *,
        token: str | None = None,
        cert: KeyPair | None = None,
        daemon: Daemon | None = None,
        timeout_s: float = 10.0,
    ) -> informerd.Client: ...


@pytest.fixture
async def connect(env: Env) -> AsyncIterator[Connect]:
    """Clients of the daemon over TLS (closed after the test), as a token or a certificate."""
    clients: list[informerd.Client] = []

    def make(
        *,
        token: str | None = None,
        cert: KeyPair | None = None,
        daemon: Daemon | None = None,
        timeout_s: float = 10.0,
    ) -> informerd.Client:
        client = informerd.Client.connect(
            (daemon or env.daemon).target,
            root_certificates=env.ca.cert,
            token=token,
            client_certificate=cert.cert if cert else None,
            client_key=cert.key if cert else None,
            timeout_s=timeout_s,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def admin(connect: Connect, env: Env) -> informerd.Client:
    return connect(token=env.admin_token)


@pytest.fixture
async def all_configmaps(admin: informerd.Client) -> informerd.Informer:
    """A cluster-wide ConfigMap informer the admin made, synced (so objects are cached)."""
    informer = await admin.informers.ensure("v1", "ConfigMap")
    await informer.wait_for_sync(30)
    return informer


_CLASSES: dict[grpc.StatusCode, type[informerd.InformerdError]] = {
    grpc.StatusCode.PERMISSION_DENIED: informerd.PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: informerd.Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: informerd.Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: informerd.ResourceExhausted,
}


async def refused(
    call: Awaitable[object],
    code: grpc.StatusCode,
    reason: str,
    **metadata: str,
) -> informerd.InformerdError:
    """Awaits ``call``, which must fail with ``code`` and ErrorInfo ``reason`` (and these
    ErrorInfo metadata); returns the SDK's exception."""
    with pytest.raises(informerd.InformerdError) as caught:
        await call
    e = caught.value
    assert (e.code, e.reason) == (code, reason), f"{type(e).__name__}: {e}"
    assert type(e) is _CLASSES[code], f"{type(e).__name__}: {e}"
    for key, value in metadata.items():
        assert e.metadata.get(key) == value, f"metadata {key}: {e.metadata}"
    return e


async def forbidden(call: Awaitable[object], **metadata: str) -> informerd.InformerdError:
    return await refused(call, grpc.StatusCode.PERMISSION_DENIED, "FORBIDDEN", **metadata)


async def at_limit(call: Awaitable[object], limit: str, user: str) -> informerd.InformerdError:
    return await refused(
        call, grpc.StatusCode.RESOURCE_EXHAUSTED, "CALLER_LIMIT", limit=limit, user=user
    )


async def first_event(informer: informerd.Informer, namespace: str = "") -> informerd.WatchEvent:
    """The first event of a new Watch stream (errors raised, not retried)."""
    async with informer.watch(namespace=namespace, reconnect=False) as events:
        return await asyncio.wait_for(events.__anext__(), 20)


async def initial_keys(informer: informerd.Informer, namespace: str = "") -> set[str]:
    """The keys a new Watch stream starts with (until Synced)."""
    keys: set[str] = set()

    async def read() -> None:
        async with informer.watch(namespace=namespace, reconnect=False) as events:
            async for event in events:
                if isinstance(event, informerd.Synced):
                    return
                assert isinstance(event, informerd.Added), event
                assert event.initial, event
                keys.add(event.object.key)

    await asyncio.wait_for(read(), 20)
    return keys


def keys_of(objects: Sequence[informerd.KubeObject]) -> set[str]:
    return {o.key for o in objects}


async def allowed_eventually(
    call: Callable[[], Awaitable[object]], what: str, timeout_s: float = 20.0
) -> None:
    """Polls ``call()`` until it succeeds: RBAC changes reach the API server's authorizer (and
    a deny the daemon cached, ``denyTTL``) within moments. Other errors than FORBIDDEN raise."""

    async def ok() -> bool:
        try:
            await call()
            return True
        except informerd.PermissionDenied as e:
            if e.reason != "FORBIDDEN":
                raise
            return False

    await eventually(ok, what, timeout_s, interval_s=0.1)


def metric_total(daemon: Daemon, name: str) -> float:
    """The sum of every series of a counter on the daemon's /metrics."""
    with urllib.request.urlopen(daemon.metrics_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(m.group(1))
        for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    )


# 1. No RBAC: nothing, not even what another caller's informer already cached.


async def test_a_user_without_rbac_reads_nothing_not_even_cached_objects(
    env: Env, connect: Connect, admin: informerd.Client, all_configmaps: informerd.Informer
) -> None:
    # The admin reads: the objects are in the daemon's cache.
    x = await all_configmaps.get("a/x")
    assert x is not None
    assert x.key == "a/x"
    assert keys_of(await all_configmaps.list()) >= A_CONFIGMAPS | B_CONFIGMAPS
    a_only = await admin.informers.ensure("v1", "ConfigMap", namespace="a")
    await a_only.wait_for_sync(30)

    nobody = connect(token=env.unprivileged_token)
    who = {"user": "unprivileged", "resource": "configmaps", "group": ""}
    for informer in (
        informerd.Informer(nobody, all_configmaps.info),
        informerd.Informer(nobody, a_only.info),
    ):
        e = await forbidden(informer.get("a/x"), verb="list", **who)
        assert 'user "unprivileged"' in e.message, e
        assert "may not list configmaps" in e.message, e
        await forbidden(informer.get("x"), **who)
        await forbidden(informer.list(), verb="list", **who)
        await forbidden(informer.list(namespace="a"), **who)
        await forbidden(first_event(informer), verb="list", **who)
        await forbidden(first_event(informer, "a"), **who)
        await forbidden(informer.refresh(), **who)  # GetInformer
        await forbidden(informer.wait_for_sync(5), **who)
        await forbidden(nobody.informers.get(informer.id), **who)
    # Nor may it start informers of its own (EnsureInformer needs the same read).
    await forbidden(nobody.informers.ensure("v1", "ConfigMap"), verb="list", **who)
    await forbidden(nobody.informers.ensure("v1", "ConfigMap", namespace="a"), namespace="a", **who)
    await forbidden(
        nobody.informers.ensure("v1", "Secret", namespace="a"),
        user="unprivileged",
        resource="secrets",
    )
    # Nor look at the daemon (Admin needs verb admin on daemon.informerd.io).
    await forbidden(nobody.admin.informers(), verb="admin", group="informerd.io", resource="daemon")


# 2. list/watch ConfigMaps in namespace a: a's ConfigMaps, nothing else.


async def test_a_user_allowed_in_namespace_a_reads_a_and_nothing_else(
    env: Env,
    connect: Connect,
    kapi: Any,
    admin: informerd.Client,
    all_configmaps: informerd.Informer,
) -> None:
    token = await sa_token(kapi, "a", "reader")
    await kube.apply_manifest(
        kapi, binding("a", "reader", "cm-reader", [service_account("a", "reader")], cluster=False)
    )
    reader = connect(token=token)
    sa_user = "system:serviceaccount:a:reader"

    # A namespaced informer on a: the reader may start one and read all of it.
    async def ensure_a() -> informerd.Informer:
        return await reader.informers.ensure("v1", "ConfigMap", namespace="a")

    await allowed_eventually(ensure_a, "the reader's RoleBinding takes effect")
    own = await ensure_a()
    await own.wait_for_sync(30)
    got = await own.get("a/x")
    assert got is not None
    assert got.body["data"] == {"k": "x"}
    assert keys_of(await own.list()) == A_CONFIGMAPS
    assert await initial_keys(own) == A_CONFIGMAPS

    # The cluster-wide informer: a's slice, asked for by namespace.
    # (GetInformer reads the whole informer: denied; a handle from its id works.)
    await forbidden(reader.informers.get(all_configmaps.id), user=sa_user)
    wide = informerd.Informer(reader, all_configmaps.info)
    got = await wide.get("a/x")
    assert got is not None
    assert got.key == "a/x"
    assert await wide.get("a/missing") is None
    assert keys_of(await wide.list(namespace="a")) == A_CONFIGMAPS
    assert await initial_keys(wide, "a") == A_CONFIGMAPS
    # Only a's changes arrive on a Watch of a: b's ConfigMap is created first, so had the
    # stream carried it, it would come before a's.
    async with wide.watch(namespace="a", reconnect=False) as events:
        seen: list[informerd.WatchEvent] = []

        async def until_synced() -> None:
            async for event in events:
                seen.append(event)
                if isinstance(event, informerd.Synced):
                    return

        await asyncio.wait_for(until_synced(), 20)
        await kube.apply_manifest(kapi, [configmap("b", "later-b"), configmap("a", "later-a")])
        event = await asyncio.wait_for(events.__anext__(), 20)
        assert isinstance(event, informerd.Added), event
        assert event.object.key == "a/later-a", event
    assert {e.object.key for e in seen if isinstance(e, informerd.Added)} == A_CONFIGMAPS
    # A Store mirrors the same slice.
    async with informerd.Store(wide, namespace="a") as store:
        await store.wait_synced(timeout_s=20)
        assert set(store.keys()) == A_CONFIGMAPS | {"a/later-a"}

    # Not b's ConfigMaps from the cluster-wide informer, nor all namespaces at once.
    who = {"user": sa_user, "resource": "configmaps"}
    await forbidden(wide.get("b/y"), **who)
    await forbidden(wide.list(namespace="b"), **who)
    await forbidden(wide.list(), verb="list", namespace="", **who)
    await forbidden(first_event(wide, "b"), **who)
    await forbidden(first_event(wide), **who)
    await forbidden(wide.get("y"), **who)  # a key without namespace reads all of them
    # Nor b's own informer, nor starting one on b or on all namespaces.
    b_only = await admin.informers.ensure("v1", "ConfigMap", namespace="b")
    await forbidden(informerd.Informer(reader, b_only.info).list(), namespace="b", **who)
    await forbidden(reader.informers.ensure("v1", "ConfigMap", namespace="b"), namespace="b", **who)
    await forbidden(reader.informers.ensure("v1", "ConfigMap"), namespace="", **who)
    # Nor Secrets, even in a.
    await forbidden(
        reader.informers.ensure("v1", "Secret", namespace="a"),
        user=sa_user,
        verb="list",
        resource="secrets",
        namespace="a",
    )
    secrets_a = await admin.informers.ensure("v1", "Secret", namespace="a")
    await secrets_a.wait_for_sync(30)
    assert await secrets_a.get("a/s") is not None
    await forbidden(informerd.Informer(reader, secrets_a.info).get("a/s"), resource="secrets")


# 3. Queues are informerd's own resource: queues.informerd.io, verb "work" to take work.


async def test_a_user_bound_to_a_queue_takes_work_from_it_and_not_from_another(
    connect: Connect, kapi: Any, admin: informerd.Client
) -> None:
    for q in ("q1", "q2"):
        await admin.queues.create(informerd.queues.queue_spec(q))
        await admin.queues.add(q, [f"{q}-k{i}" for i in range(3)])
    await kube.apply_manifest(
        kapi,
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "q1-worker"},
                "rules": [
                    {
                        "apiGroups": ["informerd.io"],
                        "resources": ["queues"],
                        "verbs": ["work", "get"],
                        "resourceNames": ["q1"],
                    }
                ],
            },
            binding("", "q1-worker", "q1-worker", [service_account("a", "worker")], cluster=True),
        ],
    )
    worker = connect(token=await sa_token(kapi, "a", "worker"))
    await allowed_eventually(lambda: worker.queues.get("q1"), "the worker's binding takes effect")

    leased: set[str] = set()
    async with informerd.WorkStream(worker, "q1", max_in_flight=10) as stream:
        while len(leased) < 3:
            leases = await asyncio.wait_for(stream.receive(), 20)
            assert leases is not None
            for lease in leases:
                leased.add(lease.key)
                stream.complete(lease, informerd.work.Outcome.SUCCESS)
        # Drain: the outcomes go out, then the daemon ends the stream.
        stream.drain()
        assert await asyncio.wait_for(stream.receive(), 20) is None
    assert leased == {"q1-k0", "q1-k1", "q1-k2"}

    async def q1_done() -> bool:
        s = (await admin.queues.get("q1")).state
        return s.depth == 0 and s.in_flight == 0

    await eventually(q1_done, "q1's keys done", 20)

    who = {"user": "system:serviceaccount:a:worker", "group": "informerd.io", "resource": "queues"}
    stream = informerd.WorkStream(worker, "q2", max_in_flight=10)
    try:
        await forbidden(stream.start(), verb="work", name="q2", **who)
    finally:
        await stream.close()
    await forbidden(worker.queues.get("q2"), verb="get", name="q2", **who)
    # Work and get, nothing more: no adding keys, not even to q1.
    await forbidden(worker.queues.add("q1", "k"), verb="update", name="q1", **who)
    assert (await admin.queues.get("q2")).state.depth == 3


# 4. Revocation: within the allow cache's TTL.


async def test_a_revoked_rolebinding_stops_access_within_the_cache_ttl(
    connect: Connect, kapi: Any, all_configmaps: informerd.Informer
) -> None:
    token = await sa_token(kapi, "a", "revoked")
    await kube.apply_manifest(
        kapi, binding("a", "revoked", "cm-reader", [service_account("a", "revoked")], cluster=False)
    )
    informer = informerd.Informer(connect(token=token), all_configmaps.info)
    await allowed_eventually(lambda: informer.get("a/x"), "the RoleBinding takes effect")

    assert await informer.get("a/x") is not None  # allowed right before the revocation
    await kube.delete(
        kapi,
        kube.Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        "revoked",
        namespace="a",
    )
    revoked_at = time.monotonic()
    allowed_after: list[float] = []
    while True:
        try:
            await informer.get("a/x")
        except informerd.PermissionDenied as denial:
            refusal = denial
            break
        allowed_after.append(time.monotonic() - revoked_at)
        assert time.monotonic() - revoked_at < TTL_S + 10, "still allowed long after the TTL"
        await asyncio.sleep(0.05)
    assert refusal.reason == "FORBIDDEN", refusal
    denied_after = time.monotonic() - revoked_at
    # The cached allow lives at most TTL_S; the API server's RBAC cache follows the deletion
    # within moments; the margin absorbs a loaded machine.
    assert denied_after < TTL_S + 3.0, (denied_after, allowed_after)
    for _ in range(3):
        await forbidden(informer.get("a/x"), user="system:serviceaccount:a:revoked")
    await forbidden(informer.list(namespace="a"))


# 5. Credentials: invalid and expired tokens, client certificates.


async def test_invalid_and_expired_tokens_are_unauthenticated(
    env: Env, connect: Connect, kapi: Any, all_configmaps: informerd.Informer
) -> None:
    def reader(token: str | None) -> informerd.Informer:
        return informerd.Informer(connect(token=token), all_configmaps.info)

    unauthenticated = (grpc.StatusCode.UNAUTHENTICATED, "NOT_AUTHENTICATED")
    e = await refused(reader("not-a-token").get("a/x"), *unauthenticated)
    assert "rejected by the cluster" in e.message, e
    e = await refused(reader(None).get("a/x"), *unauthenticated)  # TLS, but no credentials
    assert "no credentials" in e.message, e
    # An Unauthenticated is a PermissionDenied, for code that catches that.
    assert isinstance(e, informerd.PermissionDenied)

    # A real token of a service account that may read a; re-signed unchanged with the API
    # server's service-account key, it still works (the forgery is faithful) ...
    token = await sa_token(kapi, "a", "expiring")
    await kube.apply_manifest(
        kapi,
        binding("a", "expiring", "cm-reader", [service_account("a", "expiring")], cluster=False),
    )
    header, claims = jwt_parts(token)
    resigned = sign_jwt(header, claims, env.kube.service_account_key)
    await allowed_eventually(lambda: reader(resigned).get("a/x"), "the re-signed token reads")
    assert await reader(token).get("a/x") is not None
    # ... and with its validity an hour in the past it is refused.
    now = int(time.time())
    expired = sign_jwt(
        header,
        {**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600},
        env.kube.service_account_key,
    )
    e = await refused(reader(expired).get("a/x"), *unauthenticated)
    assert "expired" in e.message, e
    # The same claims signed with a key the API server does not know.
    stranger = await asyncio.to_thread(env.pki.rsa_key, "stranger")
    await refused(reader(sign_jwt(header, claims, stranger)).get("a/x"), *unauthenticated)


async def test_with_audiences_configured_only_tokens_for_them_authenticate(
    env: Env, connect: Connect, kapi: Any, tmp_path: Path
) -> None:
    await kube.apply_manifest(
        kapi,
        binding("a", "audience", "cm-reader", [service_account("a", "audience")], cluster=False),
    )
    for_informerd = await sa_token(kapi, "a", "audience", audiences=["informerd"])
    for_the_api_server = await sa_token(kapi, "a", "audience")
    with Daemon.start(
        env.kube.kubeconfig,
        tmp_path,
        config_yaml=DAEMON_CONFIG.replace(
            "authentication: {", "authentication: {audiences: [informerd], "
        ),
        extra_args=env.tls_args,
        insecure=False,
    ) as daemon:
        # The static admin token is for the API server only (audience-agnostic tokens are
        # accepted for the API server's own audiences): refused too.
        admin = connect(token=env.admin_token, daemon=daemon)
        e = await refused(
            admin.informers.ensure("v1", "ConfigMap", namespace="a"),
            grpc.StatusCode.UNAUTHENTICATED,
            "NOT_AUTHENTICATED",
        )
        assert "rejected by the cluster" in e.message, e
        reader = connect(token=for_informerd, daemon=daemon)
        await allowed_eventually(
            lambda: reader.informers.ensure("v1", "ConfigMap", namespace="a"),
            "the audience's RoleBinding takes effect",
        )
        await refused(
            connect(token=for_the_api_server, daemon=daemon).informers.ensure(
                "v1", "ConfigMap", namespace="a"
            ),
            grpc.StatusCode.UNAUTHENTICATED,
            "NOT_AUTHENTICATED",
        )


async def test_a_client_certificate_of_the_client_ca_authenticates_its_cn_and_o(
    env: Env, connect: Connect, kapi: Any, admin: informerd.Client
) -> None:
    cert = env.pki.client_cert("carol", env.client_ca, "carol", ["readers-of-b"])
    carol = connect(cert=cert)
    await forbidden(carol.informers.ensure("v1", "ConfigMap", namespace="a"), user="carol")
    # RBAC for the CN (a user) in a, for the O (a group) in b.
    await kube.apply_manifest(
        kapi,
        [
            binding("a", "carol", "cm-reader", [user("carol")], cluster=False),
            binding("b", "readers-of-b", "cm-reader", [group("readers-of-b")], cluster=False),
        ],
    )

    async def ensure(ns: str) -> informerd.Informer:
        return await carol.informers.ensure("v1", "ConfigMap", namespace=ns)

    await allowed_eventually(lambda: ensure("a"), "carol's RoleBinding takes effect")
    await allowed_eventually(lambda: ensure("b"), "readers-of-b's RoleBinding takes effect")
    a, b = await ensure("a"), await ensure("b")
    await a.wait_for_sync(30)
    await b.wait_for_sync(30)
    assert keys_of(await a.list()) >= A_CONFIGMAPS
    assert keys_of(await b.list()) >= B_CONFIGMAPS
    await forbidden(carol.informers.ensure("v1", "Secret", namespace="a"), user="carol")


async def test_a_client_certificate_of_another_ca_is_rejected_at_the_handshake(
    env: Env, connect: Connect, all_configmaps: informerd.Informer
) -> None:
    rogue = env.pki.client_cert("rogue", env.other_ca, "admin", ["system:masters"])
    decisions = "informerd_authorization_decisions_total"
    before = metric_total(env.daemon, decisions)
    log_before = env.daemon.log.read_text(errors="replace")
    client = connect(cert=rogue, timeout_s=5)
    for call in (
        informerd.Informer(client, all_configmaps.info).get("a/x"),
        client.admin.clusters(),
    ):
        e = await refused(call, grpc.StatusCode.UNAVAILABLE, "")
        assert not e.metadata, e  # no ErrorInfo: the daemon never answered
    # No call reached authentication or authorization; the TLS layer refused the certificate.
    assert metric_total(env.daemon, decisions) == before

    def handshake_failed() -> bool:
        log = env.daemon.log.read_text(errors="replace")[len(log_before) :]
        return "certificate verify failed" in log

    await eventually(handshake_failed, "the daemon logs the failed handshake", 10)


# 6. Per-caller limits: one identity past its limits is refused; another keeps its latency.


def _percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _get_latencies(informer: informerd.Informer, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        assert await informer.get("a/x") is not None
        out.append(time.perf_counter() - start)
    return out


async def test_caller_limits_refuse_one_identity_and_others_keep_their_latency(
    env: Env, connect: Connect, kapi: Any, tmp_path: Path
) -> None:
    await kube.apply_manifest(
        kapi,
        binding("a", "limit-test", "cm-reader", [group("limit-test")], cluster=False),
    )
    noisy_cert = env.pki.client_cert("noisy", env.client_ca, "noisy", ["limit-test"])
    quiet_cert = env.pki.client_cert("quiet", env.client_ca, "quiet", ["limit-test"])
    with Daemon.start(
        env.kube.kubeconfig,
        tmp_path,
        config_yaml=DAEMON_CONFIG + "callerLimits: {informers: 2, streams: 3}\n",
        extra_args=env.tls_args,
        insecure=False,
    ) as daemon:
        noisy = connect(cert=noisy_cert, daemon=daemon)
        quiet = connect(cert=quiet_cert, daemon=daemon)

        async def ensure(client: informerd.Client, n: int) -> informerd.Informer:
            return await client.informers.ensure(
                "v1", "ConfigMap", namespace="a", label_selector=f"n={n}"
            )

        await allowed_eventually(lambda: ensure(noisy, 1), "the limit-test binding takes effect")
        mine = [await ensure(noisy, 1), await ensure(noisy, 2)]
        e = await at_limit(ensure(noisy, 3), "informers", "noisy")
        assert "callerLimits.informers" in e.message, e
        # Ensuring one it made, or one that exists, is no creation.
        assert (await ensure(noisy, 1)).id == mine[0].id
        a_cms = await quiet.informers.ensure("v1", "ConfigMap", namespace="a")
        await a_cms.wait_for_sync(30)
        assert (await noisy.informers.ensure("v1", "ConfigMap", namespace="a")).id == a_cms.id

        # Streams: three open Watch streams, the fourth refused.
        open_streams: list[informerd.Watch] = []
        try:
            for _ in range(3):
                w = mine[0].watch(reconnect=False)
                open_streams.append(w)
                await asyncio.wait_for(w.__anext__(), 20)  # admitted: it answered
            e = await at_limit(first_event(mine[0]), "streams", "noisy")
            assert "callerLimits.streams" in e.message, e
            await at_limit(first_event(informerd.Informer(noisy, a_cms.info)), "streams", "noisy")

            # The quiet identity is not affected: its own informers and streams.
            own = await ensure(quiet, 10)
            await own.wait_for_sync(30)
            quiet_a = informerd.Informer(quiet, a_cms.info)
            for _ in range(3):
                assert isinstance(await first_event(quiet_a), informerd.Added)

            # Latency of quiet's Gets, alone and while noisy floods from another process.
            before = await _get_latencies(quiet_a, 300)
            flood = await asyncio.create_subprocess_exec(
                sys.executable,
                str(FLOOD_WORKER),
                f"--target={daemon.target}",
                f"--ca={env.ca.cert}",
                f"--cert={noisy_cert.cert}",
                f"--key={noisy_cert.key}",
                f"--informer={mine[0].id}",
                "--namespace=a",
                "--concurrency=16",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            assert flood.stdout is not None
            try:
                line = await asyncio.wait_for(flood.stdout.readline(), 60)
                assert line.strip() == b"flooding", line
                during = await _get_latencies(quiet_a, 300)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    flood.send_signal(signal.SIGTERM)
                out, _ = await asyncio.wait_for(flood.communicate(), 60)
            counts: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
        finally:
            for w in open_streams:
                await w.close()

        p50 = (statistics.median(before), statistics.median(during))
        p99 = (_percentile(before, 0.99), _percentile(during, 0.99))
        print(
            f"quiet Get latency p50 {p50[0] * 1e3:.2f} -> {p50[1] * 1e3:.2f} ms, "
            f"p99 {p99[0] * 1e3:.2f} -> {p99[1] * 1e3:.2f} ms; flood {counts}"
        )
        # Every attempt of the flood was refused, by its limit, and there were many.
        assert set(counts) <= {
            "ensure RESOURCE_EXHAUSTED CALLER_LIMIT informers",
            "watch RESOURCE_EXHAUSTED CALLER_LIMIT streams",
        }, counts
        assert sum(counts.values()) >= 50, counts
        # Loose bounds: a 2-core machine shares its cores between both processes and the daemon.
        assert p99[1] < max(10 * p99[0], 0.2), (p50, p99)
        assert p50[1] < max(10 * p50[0], 0.05), (p50, p99)

        # Closing a stream gives its slot back.
        async def admitted() -> bool:
            try:
                await first_event(mine[0])
                return True
            except informerd.ResourceExhausted:
                return False

        await eventually(admitted, "a stream slot back after the streams closed", 20)


# 7. The API server down: cached decisions until their TTL, then refused — never allowed.


Outcome = tuple[float, float, "informerd.InformerdError | None"]  # issued, answered, error


async def test_with_the_api_server_down_calls_are_refused_once_cached_decisions_expire(
    env: Env, connect: Connect, kapi: Any, admin: informerd.Client
) -> None:
    a_cms = await admin.informers.ensure("v1", "ConfigMap", namespace="a")
    await a_cms.wait_for_sync(30)
    # Fresh identities, nothing about them cached yet: a service account (a token: TokenReview
    # and SubjectAccessReview decisions cached) and a certificate (only SubjectAccessReviews).
    name = f"outage-{secrets.token_hex(3)}"
    token = await sa_token(kapi, "a", name)
    cert = env.pki.client_cert(name, env.client_ca, name)
    await kube.apply_manifest(
        kapi,
        binding("a", name, "cm-reader", [service_account("a", name), user(name)], cluster=False),
    )
    probes = {
        "TokenReview": informerd.Informer(connect(token=token), a_cms.info),
        "SubjectAccessReview": informerd.Informer(connect(cert=cert), a_cms.info),
    }
    stranger = informerd.Informer(connect(token=await sa_token(kapi, "a", "stranger")), a_cms.info)
    for probe in probes.values():
        await allowed_eventually(functools.partial(probe.get, "a/x"), "the binding takes effect")
    # Their cached decisions are at most TTL_S old now: let them expire, then warm them again,
    # so that every review behind the cached answers happens between warm_start and warm_end.
    await asyncio.sleep(TTL_S + 0.2)
    warm_start = time.monotonic()
    for probe in probes.values():
        assert await probe.get("a/x") is not None
    warm_end = time.monotonic()

    outcomes: dict[str, list[Outcome]] = {what: [] for what in probes}
    os.kill(env.kube.pid, signal.SIGSTOP)
    try:
        while min(sum(o[2] is not None for o in v) for v in outcomes.values()) < 3:
            for what, probe in probes.items():
                issued = time.monotonic()
                assert issued < warm_end + TTL_S + 30, f"not refused: {outcomes}"
                try:
                    await probe.get("a/x")
                    outcomes[what].append((issued, time.monotonic(), None))
                except informerd.InformerdError as refusal:
                    outcomes[what].append((issued, time.monotonic(), refusal))
            await asyncio.sleep(0.1)  # a probe every 100 ms
        # A caller never seen before: its token cannot be reviewed.
        e = await refused(
            stranger.get("a/x"), grpc.StatusCode.UNAVAILABLE, "AUTHORIZATION_UNAVAILABLE"
        )
        assert "TokenReview could not be made" in e.message, e
    finally:
        os.kill(env.kube.pid, signal.SIGCONT)

    for what, seen in outcomes.items():
        # Right after the stop, the cached decisions answer.
        if seen[0][0] < warm_start + TTL_S - 0.5:
            assert seen[0][2] is None, (what, seen[0])
        first_refusal = next(i for i, o in enumerate(seen) if o[2] is not None)
        # Never allowed past the TTL: an allowed call was checked before its decisions
        # expired, and once refused, a call is never allowed again while the server is down.
        for issued, _, err in seen[:first_refusal]:
            assert err is None
            assert issued < warm_end + TTL_S, (what, issued - warm_end, seen)
        for issued, answered, err in seen[first_refusal:]:
            assert err is not None, (what, seen)
            assert (err.code, err.reason) == (
                grpc.StatusCode.UNAVAILABLE,
                "AUTHORIZATION_UNAVAILABLE",
            ), err
            assert isinstance(err, informerd.Unavailable)
            assert f"{what} could not be made" in err.message, err
            # Refused within the review timeout, not hung on the stopped server.
            assert answered - issued < REVIEW_TIMEOUT_S + 3.0, (answered - issued, err)
        # Refused soon after the TTL.
        assert seen[first_refusal][0] < warm_end + TTL_S + REVIEW_TIMEOUT_S + 3.0, (what, seen)

    # Back up: allowed again.
    for probe in probes.values():

        async def allowed_again(probe: informerd.Informer = probe) -> bool:
            try:
                return await probe.get("a/x") is not None
            except informerd.Unavailable:
                return False

        await eventually(allowed_again, "allowed again after SIGCONT", 60, interval_s=0.2)
