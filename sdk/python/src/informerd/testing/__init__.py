"""Real processes for controller tests: informerd with an API server (the fake or the real one).

    with FakeApiServer.start() as api, Daemon.start(kubeconfig=api.kubeconfig) as daemon:
        client = informerd.Client.connect(daemon.target)

Replicas of a replica set are daemons on one Lease::

    election = LeaderElection.fast(namespace="informerd", name="my-set")
    replicas = [Daemon.start(api.kubeconfig, leader_election=election) for _ in range(3)]

Binaries are found through environment variables, else in the informerd repository the current
directory is in (as `make test` builds them):

- ``INFORMERD_BIN``: the daemon (``bazel-bin/server/informerd``);
- ``INFORMERD_FAKE_APISERVER``: the fake API server (``out/fake-apiserver``: make fake-apiserver);
- ``INFORMERD_KUBE_START``: the real kube-apiserver's start script (``testing/kube/start``).

The pytest plugin (:mod:`informerd.testing.plugin`, registered by the package) turns these into
fixtures.
"""

from informerd.testing.processes import (
    ApiServer,
    Daemon,
    FakeApiServer,
    KubeApiServer,
    LeaderElection,
    find_binary,
    repo_root,
)
from informerd.testing.waiting import eventually, queue_idle, wait_until

__all__ = [
    "ApiServer",
    "Daemon",
    "FakeApiServer",
    "KubeApiServer",
    "LeaderElection",
    "eventually",
    "find_binary",
    "queue_idle",
    "repo_root",
    "wait_until",
]
