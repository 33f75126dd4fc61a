// Decoding of recorded watch streams: informerd's WatchDecoder against the floor of the same work
// (bench/metadata_floor.h: an On-Demand scan of each event for its type and the object's identity,
// and a copy of the object's bytes), and, for reference, simdjson's full DOM parse of each line. tools/bench_watch runs the same bytes through
// client-go's watch decoder (bench/baseline/cmd/watch-baseline).
//
// The streams are generated here, deterministically: ConfigMaps (one data payload) and realistic
// Pods (labels, annotations, owner reference, managedFields, containers with env, ports,
// resources, probes and mounts, volumes, tolerations, status with conditions and container
// statuses) of about 1 KiB, 10 KiB and 100 KiB, each stream about 8 MiB of MODIFIED events over
// 100 objects, fed to the decoder in 16 KiB chunks (what curl hands over).
//
//   watch_decode_benchmark --write_streams=DIR   writes DIR/<kind>-<size>.jsonl and exits.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "bench/metadata_floor.h"
#include "client/watch_decoder.h"
#include "simdjson.h"

namespace informerd::client {
namespace {

constexpr size_t kStreamBytes = 8 << 20;
constexpr size_t kChunk = 16 << 10;

std::string Filler(size_t n, int seed) {
  std::string s(n, 'a');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + seed * 13) % 26);
  return s;
}

std::string ConfigMap(int i, int rv, size_t target) {
  std::string head = absl::StrCat(
      R"({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"config-)", i,
      R"(","namespace":"team-)", i % 7, R"(","uid":"6f1c2a4e-1b9d-4c1e-9a55-)", 100000000000 + i,
      R"(","resourceVersion":")", rv, R"(","creationTimestamp":"2026-03-01T10:00:00Z",)",
      R"("labels":{"app.kubernetes.io/name":"svc-)", i % 13,
      R"(","app.kubernetes.io/part-of":"shop"}},"data":{"payload":")");
  std::string tail = R"("}})";
  size_t fill = target > head.size() + tail.size() ? target - head.size() - tail.size() : 1;
  return head + Filler(fill, i + rv) + tail;
}

std::string Container(int i, int c, int envs) {
  std::string env;
  for (int e = 0; e < envs; ++e) {
    if (e) env += ",";
    env += absl::StrCat(R"({"name":"FEATURE_FLAG_)", e, R"(","value":"enabled-for-tenant-)", (i + e) % 97, R"("})");
  }
  return absl::StrCat(
      R"({"name":"app-)", c, R"(","image":"registry.example.com/shop/app-)", c,
      R"(:v1.)", i % 9, R"(.3","command":["/bin/server","--port=8080","--log-level=info"],)",
      R"("ports":[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}],)",
      R"("env":[)", env, R"(],"resources":{"limits":{"cpu":"1","memory":"512Mi"},"requests":{"cpu":"250m","memory":"256Mi"}},)",
      R"("volumeMounts":[{"name":"config","mountPath":"/etc/app"},{"name":"kube-api-access-x7k2p","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],)",
      R"("livenessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"initialDelaySeconds":10,"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},)",
      R"("readinessProbe":{"httpGet":{"path":"/readyz","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":5,"successThreshold":1,"failureThreshold":3},)",
      R"("terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"})");
}

std::string ContainerStatus(int i, int c) {
  return absl::StrCat(
      R"({"name":"app-)", c, R"(","state":{"running":{"startedAt":"2026-03-01T10:00:)", 10 + c,
      R"(Z"}},"lastState":{},"ready":true,"restartCount":)", i % 3,
      R"(,"image":"registry.example.com/shop/app-)", c, R"(:v1.)", i % 9,
      R"(.3","imageID":"registry.example.com/shop/app@sha256:4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b",)",
      R"("containerID":"containerd://9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b","started":true})");
}

std::string Pod(int i, int rv, int containers, int envs) {
  std::string cs, statuses;
  for (int c = 0; c < containers; ++c) {
    if (c) cs += ",", statuses += ",";
    cs += Container(i, c, envs);
    statuses += ContainerStatus(i, c);
  }
  return absl::StrCat(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d9f8b6c5-)", i,
      R"(","generateName":"web-7d9f8b6c5-","namespace":"team-)", i % 7,
      R"(","uid":"0c2f4e6a-8b1d-4f3a-9c5e-)", 200000000000 + i, R"(","resourceVersion":")", rv,
      R"(","generation":1,"creationTimestamp":"2026-03-01T10:00:00Z",)",
      R"("labels":{"app":"web","pod-template-hash":"7d9f8b6c5","tier":"frontend","version":"v1"},)",
      R"("annotations":{"kubectl.kubernetes.io/restartedAt":"2026-02-28T09:00:00Z","prometheus.io/scrape":"true","prometheus.io/port":"9090"},)",
      R"("ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b6c5","uid":"5e1d3c2b-0a9f-4e8d-7c6b-5a4f3e2d1c0b","controller":true,"blockOwnerDeletion":true}],)",
      R"("managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-03-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5e1d3c2b\"}":{}}},"f:spec":{"f:containers":{},"f:dnsPolicy":{},"f:restartPolicy":{}}}},)",
      R"({"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-03-01T10:00:20Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:startTime":{}}},"subresource":"status"}]},)",
      R"("spec":{"volumes":[{"name":"config","configMap":{"name":"web-config","defaultMode":420}},{"name":"kube-api-access-x7k2p","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}}],)",
      R"("containers":[)", cs, R"(],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"web","serviceAccount":"web","nodeName":"node-)", i % 50,
      R"(","securityContext":{"runAsNonRoot":true,"fsGroup":2000},"schedulerName":"default-scheduler",)",
      R"("tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],)",
      R"("priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},)",
      R"("status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:01Z"},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:20Z"},{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:20Z"},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-03-01T10:00:00Z"}],)",
      R"("hostIP":"10.0.)", i % 50, R"(.1","podIP":"10.244.)", i % 50, ".", i % 250,
      R"(","podIPs":[{"ip":"10.244.)", i % 50, ".", i % 250, R"("}],"startTime":"2026-03-01T10:00:00Z","containerStatuses":[)",
      statuses, R"(],"qosClass":"Burstable"}})");
}

// A small pod (about 1 KiB): what a minimal Deployment's pod looks like without managedFields.
std::string SmallPod(int i, int rv) {
  return absl::StrCat(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-7d9f8b6c5-)", i,
      R"(","namespace":"team-)", i % 7, R"(","uid":"0c2f4e6a-8b1d-4f3a-9c5e-)", 200000000000 + i,
      R"(","resourceVersion":")", rv, R"(","creationTimestamp":"2026-03-01T10:00:00Z",)",
      R"("labels":{"app":"web","pod-template-hash":"7d9f8b6c5"},)",
      R"("ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b6c5","uid":"5e1d3c2b-0a9f-4e8d-7c6b-5a4f3e2d1c0b","controller":true,"blockOwnerDeletion":true}]},)",
      R"("spec":{"containers":[{"name":"app","image":"registry.example.com/shop/app:v1.)", i % 9,
      R"(.3","ports":[{"containerPort":8080,"protocol":"TCP"}],"resources":{"requests":{"cpu":"250m","memory":"256Mi"}}}],)",
      R"("restartPolicy":"Always","nodeName":"node-)", i % 50, R"(","schedulerName":"default-scheduler"},)",
      R"("status":{"phase":"Running","hostIP":"10.0.)", i % 50, R"(.1","podIP":"10.244.)", i % 50, ".",
      i % 250, R"(","startTime":"2026-03-01T10:00:00Z","qosClass":"Burstable"}})");
}

// A pod of about `target` bytes: containers and env entries grow with it.
std::string SizedPod(int i, int rv, size_t target) {
  if (target < 3000) return SmallPod(i, rv);
  int containers = target >= 50000 ? 8 : target >= 5000 ? 3 : 1;
  int envs = 0;
  std::string pod = Pod(i, rv, containers, envs);
  while (pod.size() < target * 95 / 100 && envs < 10000) {
    envs += 1 + static_cast<int>((target - pod.size()) / (containers * 70));
    pod = Pod(i, rv, containers, envs);
  }
  return pod;
}

std::string MakeStream(const std::string& kind, size_t target) {
  std::string stream;
  for (int n = 0; stream.size() < kStreamBytes; ++n) {
    int i = n % 100, rv = 1000 + n;
    std::string object = kind == "configmap" ? ConfigMap(i, rv, target) : SizedPod(i, rv, target);
    absl::StrAppend(&stream, R"({"type":"MODIFIED","object":)", object, "}\n");
  }
  return stream;
}

const std::string& Stream(const std::string& kind, size_t target) {
  static auto* streams = new std::map<std::string, std::string>();
  std::string name = absl::StrCat(kind, "-", target);
  auto it = streams->find(name);
  if (it == streams->end()) it = streams->emplace(name, MakeStream(kind, target)).first;
  return it->second;
}

size_t CountLines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Events are handed on after every chunk, as a watch does (the store keeps the new object and
// drops the version it replaces, so memory stays level): the Objects die there.
void BM_Decode(benchmark::State& state, const std::string& kind) {
  const std::string& stream = Stream(kind, state.range(0));
  std::vector<WatchEvent> events;
  size_t decoded = 0;
  for (auto _ : state) {
    auto decoder = WatchDecoder::Create().value();
    for (size_t at = 0; at < stream.size(); at += kChunk) {
      absl::Status s = decoder->Feed(absl::string_view(stream).substr(at, kChunk), &events);
      if (!s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
      decoded += events.size();
      benchmark::DoNotOptimize(events.data());
      events.clear();
    }
  }
  state.SetItemsProcessed(decoded);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
  state.counters["event_bytes"] = static_cast<double>(stream.size()) / CountLines(stream);
}

std::vector<std::pair<size_t, size_t>> Lines(const std::string& stream) {
  std::vector<std::pair<size_t, size_t>> lines;
  for (size_t at = 0; at < stream.size();) {
    size_t nl = stream.find('\n', at);
    lines.emplace_back(at, nl - at);
    at = nl + 1;
  }
  return lines;
}

// The floor: the metadata scan and the copy of the object of each event line, in place, lines
// found beforehand (the decoder finds them itself).
void BM_Floor(benchmark::State& state, const std::string& kind) {
  const std::string& stream = Stream(kind, state.range(0));
  simdjson::padded_string padded(stream);
  const std::vector<std::pair<size_t, size_t>> lines = Lines(stream);
  bench::MetadataFloor floor;
  size_t decoded = 0;
  for (auto _ : state) {
    for (const auto& [at, len] : lines) {
      if (!floor.Decode(padded.data() + at, len)) {
        state.SkipWithError("not a watch event");
        return;
      }
      benchmark::DoNotOptimize(floor.object_json().data());
    }
    decoded += lines.size();
  }
  state.SetItemsProcessed(decoded);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}

// For reference (not a floor: it does more than informerd, which reads metadata only): simdjson's
// full DOM parse of each event line.
void BM_DomParse(benchmark::State& state, const std::string& kind) {
  const std::string& stream = Stream(kind, state.range(0));
  simdjson::padded_string padded(stream);
  const std::vector<std::pair<size_t, size_t>> lines = Lines(stream);
  simdjson::dom::parser parser;
  size_t parsed = 0;
  for (auto _ : state) {
    for (const auto& [at, len] : lines) {
      simdjson::dom::element doc;
      if (parser.parse(padded.data() + at, len, false).get(doc)) {
        state.SkipWithError("parse failed");
        return;
      }
      benchmark::DoNotOptimize(doc);
    }
    parsed += lines.size();
  }
  state.SetItemsProcessed(parsed);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}

BENCHMARK_CAPTURE(BM_Decode, configmap, std::string("configmap"))->Arg(1024)->Arg(10240)->Arg(102400);
BENCHMARK_CAPTURE(BM_Decode, pod, std::string("pod"))->Arg(1024)->Arg(10240)->Arg(102400);
BENCHMARK_CAPTURE(BM_Floor, configmap, std::string("configmap"))->Arg(1024)->Arg(10240)->Arg(102400);
BENCHMARK_CAPTURE(BM_Floor, pod, std::string("pod"))->Arg(1024)->Arg(10240)->Arg(102400);
BENCHMARK_CAPTURE(BM_DomParse, configmap, std::string("configmap"))->Arg(1024)->Arg(10240)->Arg(102400);
BENCHMARK_CAPTURE(BM_DomParse, pod, std::string("pod"))->Arg(1024)->Arg(10240)->Arg(102400);

int WriteStreams(const std::string& dir) {
  for (const char* kind : {"configmap", "pod"}) {
    for (size_t size : {1024, 10240, 102400}) {
      std::string path = absl::StrCat(dir, "/", kind, "-", size, ".jsonl");
      std::ofstream out(path, std::ios::binary);
      const std::string& s = Stream(kind, size);
      out.write(s.data(), s.size());
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace informerd::client

int main(int argc, char** argv) {
  const char kFlag[] = "--write_streams=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, sizeof(kFlag) - 1) == 0) {
      return informerd::client::WriteStreams(argv[i] + sizeof(kFlag) - 1);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
