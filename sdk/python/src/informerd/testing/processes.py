"""Processes the test fixtures run: the daemon and the API servers, each stopped by its pid."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

_ENV = {
    "informerd": ("INFORMERD_BIN", "bazel-bin/server/informerd"),
    "fake-apiserver": ("INFORMERD_FAKE_APISERVER", "out/fake-apiserver"),
    "kube-start": ("INFORMERD_KUBE_START", "testing/kube/start"),
}


def repo_root(start: Path | None = None) -> Path | None:
    """The informerd repository containing ``start`` (default: the current directory)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "WORKSPACE").exists() and (d / "server").is_dir() and (d / "sdk").is_dir():
            return d
    return None


def find_binary(name: str) -> Path:
    """The path of ``informerd``, ``fake-apiserver`` or ``kube-start`` (see the module doc)."""
    env, relative = _ENV[name]
    if os.environ.get(env):
        path = Path(os.environ[env])
    else:
        root = repo_root() or repo_root(Path(__file__))
        if root is None:
            raise FileNotFoundError(f"{name}: set {env} (not inside an informerd checkout)")
        path = root / relative
    if not path.exists():
        raise FileNotFoundError(f"{name}: {path} does not exist (set {env})")
    return path


def _wait_for_line(
    path: Path, pattern: str, proc: subprocess.Popen[bytes], timeout_s: float
) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    regex = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if m := regex.search(text):
            return m
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before printing /{pattern}/: {text}")
        time.sleep(0.05)
    raise TimeoutError(f"no /{pattern}/ within {timeout_s} s")


class _Process:
    proc: subprocess.Popen[bytes] | None = None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Signals the process and waits for it (SIGKILL after ``timeout_s``). A process
        stopped (SIGSTOP) is continued after the signal, so that it can act on it."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            self.proc.send_signal(signal.SIGCONT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


_Api = TypeVar("_Api", bound="ApiServer")


class ApiServer(_Process):
    """What the daemon needs of an API server: a kubeconfig file."""

    kubeconfig: Path

    def close(self) -> None:
        self.stop()

    def __enter__(self: _Api) -> _Api:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FakeApiServer(ApiServer):
    """testing/apiserver: a fast, faithful fake with seeding and fault injection."""

    url: str

    def __init__(self, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        self._dir = workdir
        self.kubeconfig = workdir / "fake.kubeconfig"
        out = workdir / "fake.out"
        self._out: IO[bytes] = out.open("wb")
        self.proc = subprocess.Popen(
            [
                str(find_binary("fake-apiserver")),
                "--addr",
                "127.0.0.1:0",
                "--kubeconfig-out",
                str(self.kubeconfig),
                *extra_args,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        self.url = _wait_for_line(out, r"listening on (\S+)", self.proc, 30).group(1)

    @classmethod
    def start(cls, workdir: Path | None = None, extra_args: Sequence[str] = ()) -> FakeApiServer:
        return cls(workdir or Path(tempfile.mkdtemp(prefix="informerd-fake-")), extra_args)

    def request(self, method: str, path: str, body: object = None) -> Any:
        """Sends ``body`` as JSON to ``path`` (the Kubernetes API, e.g.
        ``/api/v1/namespaces/demo/configmaps``, or the control endpoint) and returns the decoded
        answer; an error status raises ``urllib.error.HTTPError``."""
        req = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def control(self, path: str, body: object) -> object:
        """POSTs JSON to the fake's control endpoint, e.g. ``control("/_fake/seed", {...})``."""
        return self.request("POST", path, body)

    def seed(self, resource: str, namespace: str, count: int, object_bytes: int = 0) -> None:
        """Creates ``count`` objects named seed-NNNNNNN of a built-in resource (of about
        ``object_bytes`` each when given)."""
        body = {"resource": resource, "namespace": namespace, "count": count}
        if object_bytes:
            body["bytes"] = object_bytes
        self.control("/_fake/seed", body)

    def create_namespace(self, name: str) -> None:
        """Creates the namespace unless it exists."""
        try:
            self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise

    def put_configmap(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Creates the ConfigMap, or replaces it (unconditionally) if it exists; returns it."""
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "data": data,
        }
        collection = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            result: dict[str, Any] = self.request("POST", collection, obj)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
            result = self.request("PUT", f"{collection}/{name}", obj)
        return result

    def delete_configmap(self, namespace: str, name: str) -> None:
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def close(self) -> None:
        super().close()
        self._out.close()


class KubeApiServer(ApiServer):
    """A real kube-apiserver with embedded etcd (testing/kube).

    ``kubeconfig`` is the admin's (user ``admin``, group ``system:masters``),
    ``unprivileged_kubeconfig`` an unprivileged user's (``unprivileged``, group
    ``informerd:unprivileged``, no RBAC bindings), ``url`` the server's address and ``pid`` its
    process (not a child of the caller). The server keeps its credentials in a private directory
    under ``work_dir``; :attr:`service_account_key` is the RSA key it signs service-account
    tokens with (for tests that forge tokens: expired ones, say)."""

    def __init__(self, workdir: Path, timeout_s: float = 180) -> None:
        self.kubeconfig = workdir / "kube.kubeconfig"
        self.unprivileged_kubeconfig = workdir / "kube-unprivileged.kubeconfig"
        self.work_dir = workdir / "kube-work"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                str(find_binary("kube-start")),
                "--kubeconfig-out",
                str(self.kubeconfig),
                "--unprivileged-kubeconfig-out",
                str(self.unprivileged_kubeconfig),
                "--log",
                str(workdir / "kube.log"),
                "--timeout",
                str(int(timeout_s)),
                "--",
                "--work-dir",
                str(self.work_dir),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s + 600,  # a first build of the test server takes minutes
        )
        if done.returncode != 0:
            raise RuntimeError(f"testing/kube/start failed: {done.stdout}{done.stderr}")
        m = re.search(r"^pid: (\d+)$", done.stdout, re.M)
        if not m:
            raise RuntimeError(f"testing/kube/start printed no pid: {done.stdout}")
        self.pid = int(m.group(1))
        self.server = re.search(r"^server: (\S+)$", done.stdout, re.M)
        self.url = self.server.group(1) if self.server else ""

    @property
    def service_account_key(self) -> Path:
        """The PEM RSA private key the server signs (and verifies) service-account tokens with."""
        keys = sorted(self.work_dir.glob("kube-testserver-*/service-account.key"))
        if len(keys) != 1:
            raise FileNotFoundError(
                f"want one service-account.key under {self.work_dir}, found {keys}"
            )
        return keys[0]

    @classmethod
    def start(cls, workdir: Path | None = None) -> KubeApiServer:
        return cls(workdir or Path(tempfile.mkdtemp(prefix="informerd-kube-")))

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _duration(seconds: float) -> str:
    """A duration flag's value: ``3s``, or ``500ms`` below whole seconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True)
class LeaderElection:
    """Leader election for :class:`Daemon` (the ``--leader_elect*`` flags, kube's names).

    Daemons with equal ``namespace``/``name`` form a replica set on that Lease, in the default
    cluster (which must hold the namespace). ``identity`` "" names the daemon ``replica-<port>``
    (:attr:`Daemon.identity`); each daemon advertises its own ``--listen`` address. Timings
    None keep the daemon's defaults (15 s, 10 s, 2 s, as client-go's); :meth:`fast` makes
    failovers take seconds, for tests.
    """

    namespace: str = "informerd"
    name: str = "informerd"
    identity: str = ""
    lease_duration_s: float | None = None
    renew_deadline_s: float | None = None
    retry_period_s: float | None = None

    @classmethod
    def fast(cls, namespace: str = "informerd", name: str = "informerd") -> LeaderElection:
        """Lease duration 3 s, renew deadline 2 s, retry period 500 ms."""
        return cls(namespace, name, lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.5)

    def args(self, identity: str, advertise_address: str) -> list[str]:
        args = [
            "--leader_elect",
            f"--leader_elect_resource_namespace={self.namespace}",
            f"--leader_elect_resource_name={self.name}",
            f"--leader_elect_identity={identity}",
            f"--advertise_address={advertise_address}",
        ]
        for flag, value in (
            ("lease_duration", self.lease_duration_s),
            ("renew_deadline", self.renew_deadline_s),
            ("retry_period", self.retry_period_s),
        ):
            if value is not None:
                args.append(f"--leader_elect_{flag}={_duration(value)}")
        return args


class Daemon(_Process):
    """informerd against one cluster (``kubeconfig``), on a fixed port so that :meth:`restart`
    brings it back at the same target. With ``leader_election`` it is a replica of the set on
    that Lease (:attr:`identity` is its name there)."""

    target: str
    metrics_url: str
    identity: str

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path | None = None,
        config_yaml: str | None = None,
        extra_args: Sequence[str] = (),
        insecure: bool = True,
        leader_election: LeaderElection | None = None,
    ) -> None:
        self._dir = workdir
        self._args = [str(find_binary("informerd"))]
        if insecure:
            # Local-development mode; tests of authentication pass TLS and set insecure=False.
            self._args.append("--insecure_allow_unauthenticated")
        if kubeconfig is not None:
            self._args.append(f"--kubeconfig={kubeconfig}")
        if config_yaml is not None:
            (workdir / "informerd.yaml").write_text(config_yaml)
            self._args.append(f"--config={workdir / 'informerd.yaml'}")
        self.port = _free_port()
        self.target = f"127.0.0.1:{self.port}"
        self._args += [f"--listen={self.target}", "--metrics_listen=127.0.0.1:0"]
        self.leader_election = leader_election
        self.identity = ""
        if leader_election is not None:
            self.identity = leader_election.identity or f"replica-{self.port}"
            self._args += leader_election.args(self.identity, self.target)
        self._args += extra_args
        self.starts = 0
        self._launch()

    @classmethod
    def start(
        cls,
        kubeconfig: Path | None = None,
        workdir: Path | None = None,
        config_yaml: str | None = None,
        extra_args: Sequence[str] = (),
        insecure: bool = True,
        leader_election: LeaderElection | None = None,
    ) -> Daemon:
        return cls(
            workdir or Path(tempfile.mkdtemp(prefix="informerd-")),
            kubeconfig,
            config_yaml,
            extra_args,
            insecure,
            leader_election,
        )

    def _launch(self) -> None:
        self.starts += 1
        out = self._dir / f"informerd.{self.starts}.out"
        self.log = self._dir / f"informerd.{self.starts}.log"
        with out.open("wb") as o, self.log.open("wb") as e:
            self.proc = subprocess.Popen(self._args, stdout=o, stderr=e)
        try:
            m = _wait_for_line(out, r"^metrics: (\S+)$", self.proc, 60)
        except Exception as ex:
            raise RuntimeError(
                f"informerd did not start: {ex}; log: {self.log.read_text()}"
            ) from ex
        self.metrics_url = m.group(1)
        if not self.metrics_url.startswith("http"):
            self.metrics_url = "http://" + self.metrics_url

    def send_signal(self, sig: int) -> None:
        """Sends ``sig`` to the running daemon (e.g. SIGSTOP, SIGCONT) without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stops the daemon (with ``sig``) and starts it again on the same port."""
        self.stop(sig)
        self._launch()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def cleanup_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
