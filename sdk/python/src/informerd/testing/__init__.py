"""Real processes for controller tests: informerd with an API server (the fake or the real one).

    with FakeApiServer.start() as api, Daemon.start(kubeconfig=api.kubeconfig) as daemon:
        client = informerd.Client.connect(daemon.target)

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
    find_binary,
    repo_root,
)
from informerd.testing.waiting import eventually, queue_idle

__all__ = [
    "ApiServer",
    "Daemon",
    "FakeApiServer",
    "KubeApiServer",
    "eventually",
    "find_binary",
    "queue_idle",
    "repo_root",
]
