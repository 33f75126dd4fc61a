"""What the benchmark drivers (tools/bench_*, tools/profile_service) share: the fake API server's
control calls and the benchmark's Pod shape, starting and stopping informerd, the bench/load
command lines of the service scenarios, and reading a process's figures from /proc.
Imported by the scripts beside it (they put tools/ on sys.path)."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def fail(message):
    sys.exit(f"{os.path.basename(sys.argv[0])}: {message}")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read() or b"{}")



def start_apiserver(tmp, history, flags=()):
    """The fake API server (out/fake-apiserver) on a free port, keeping `history` events, with
    `flags` besides; returns (process, url, kubeconfig path)."""
    kubeconfig = os.path.join(tmp, "kubeconfig")
    proc = subprocess.Popen([os.path.join(ROOT, "out/fake-apiserver"), "--addr", "127.0.0.1:0",
                             "--kubeconfig-out", kubeconfig, "--history", str(history), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        fail(f"fake-apiserver said {line!r}")
    return proc, line.split()[-1], kubeconfig


def json_line(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])



def start_daemon(binary, tmp, kubeconfig, flags=("--insecure_allow_unauthenticated",), name="informerd",
                 prefix=()):
    config = os.path.join(tmp, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f'clusters: [{{name: fake, kubeconfig: "{kubeconfig}"}}]\n' if kubeconfig else "{}\n")
    proc = subprocess.Popen([*prefix, binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                             *flags, f"--config={config}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addr = None
    proc.metrics_addr = None
    deadline = time.time() + 60
    while (addr is None or proc.metrics_addr is None) and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("grpc: "):
            addr = line.split()[1]
        if line.startswith("metrics: "):
            proc.metrics_addr = line.split()[1]
    if addr is None:
        proc.kill()
        fail("informerd did not print its grpc address")
    # Keep draining its output so that it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, addr



def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()



def work_flags(addr, queue, workers, batch, keys, seconds):
    """bench/load's flags for a Work-stream run: `keys` prefilled into `queue`, drained by
    `workers` no-op workers taking `batch` keys at a time, up to four batches in flight (a
    pipelining worker, as the SDKs run) so that the stream is not bound by round trips."""
    return [f"--target={addr}", f"--queue={queue}", "--adders=0", "--prefill", f"--keys={keys}",
            f"--workers={workers}", f"--batch={batch}", f"--in_flight={max(8, 4 * batch)}",
            f"--duration={seconds}s", "--delete_queue", "--json"]


def events_flags(addr, url, ns, queue, rate, seconds):
    """bench/load's flags for an API-server change → key delivered run: `queue` bound to an
    informer of ConfigMaps in `ns`, `rate` PATCHes a second to 100 of them, one worker."""
    return [f"--target={addr}", "--resource=v1/configmaps", f"--namespace={ns}", f"--queue={queue}",
            "--bind", "--adders=0", "--workers=1", "--batch=16", f"--apiserver={url}",
            f"--change_rate={rate}", "--change_objects=100", "--change_threads=2",
            f"--duration={max(seconds, 5)}s", "--delete_queue", "--json"]


def fanout_flags(addr, url, ns, rate, seconds):
    """bench/load's flags for a watch fan-out run: 100 Watch subscribers to the ConfigMaps of `ns`
    while the fake API server's churn changes 1000 of them `rate` times a second."""
    return [f"--target={addr}", "--resource=v1/configmaps", f"--namespace={ns}", "--subscribers=100",
            f"--apiserver={url}", f"--change_rate={rate}", "--churn", "--change_objects=1000",
            f"--duration={max(seconds, 5)}s", "--json"]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime



def proc_status(pid, field):
    """A number from /proc/PID/status ("Threads", "VmRSS" in kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0



def pod(i):
    """A realistic Pod (a Deployment's replica, scheduled and running): ~8 KiB once the server has
    recorded managedFields for its create and its status update."""
    name = f"web-7d9f8b6c5d-{i:06d}"
    env = [{"name": f"SETTING_{k}", "value": f"value-{k}-{i % 97}"} for k in range(22)]
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}})
    container = lambda n, image: {
        "name": n, "image": image, "imagePullPolicy": "IfNotPresent",
        "args": ["--port=8080", "--log_level=info", f"--shard={i % 16}"],
        "env": env,
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/web", "readOnly": True},
                         {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 10,
                          "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                           "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }
    obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": "web-7d9f8b6c5d-",
            "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5d", "tier": "frontend", "shard": str(i % 16)},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8b6c5d",
                                 "uid": "6f2b0c8e-3f4a-4b9e-9d2c-1a7e5b3c9f10", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [container("web", "registry.example.com/web:1.27.3"),
                           container("sidecar", "registry.example.com/proxy:2.4.1")],
            "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                        {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "web", "serviceAccount": "web", "nodeName": f"node-{i % 50:03d}",
            "securityContext": {"runAsNonRoot": True, "fsGroup": 2000}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
    }
    status = {"status": {
        "phase": "Running", "hostIP": f"10.0.{i % 50}.1", "podIP": f"10.244.{i % 250}.{i % 200 + 2}",
        "podIPs": [{"ip": f"10.244.{i % 250}.{i % 200 + 2}"}], "startTime": "2026-11-01T10:00:05Z", "qosClass": "Burstable",
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-11-01T10:00:12Z"}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{"name": n, "state": {"running": {"startedAt": "2026-11-01T10:00:09Z"}}, "lastState": {},
                               "ready": True, "restartCount": 0, "image": img, "imageID": img + "@sha256:" + "ab" * 32,
                               "containerID": "containerd://" + "cd" * 32, "started": True}
                              for n, img in (("web", "registry.example.com/web:1.27.3"), ("sidecar", "registry.example.com/proxy:2.4.1"))],
    }}
    return name, obj, status



def seed_pods(url, ns, count):
    host = url.split("//", 1)[1]
    post(url, "/_fake/seed", {"resource": "configmaps", "namespace": ns, "count": 0})  # the namespace
    errors = []

    def worker(start):
        conn = http.client.HTTPConnection(host)
        for i in range(start, count, 8):
            name, obj, status = pod(i)
            for method, path, body in (("POST", f"/api/v1/namespaces/{ns}/pods", obj),
                                       ("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", status)):
                conn.request(method, path, json.dumps(body), {
                    "Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json",
                    "User-Agent": "kubelet/v1.37.2" if method == "PATCH" else "kube-controller-manager/v1.37.2"})
                r = conn.getresponse()
                data = r.read()
                if r.status >= 300:
                    errors.append(f"{method} {path}: {r.status} {data[:200]!r}")
                    return

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("seeding pods failed: " + errors[0])

