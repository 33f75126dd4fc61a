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
//   watch_decode_benchmark --benchmark_filter=Pod   Google Benchmark's --benchmark_* flags.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "benchmark/benchmark.h"
#include "bench/metadata_floor.h"
#include "bench/pods.h"
#include "client/watch_decoder.h"
#include "simdjson.h"

ABSL_FLAG(int, chunk_bytes, 16 << 10,
          "Bytes fed to the decoder at a time (1..16777216; curl hands over 16 KiB).");
ABSL_FLAG(std::string, write_streams, "",
          "Write the generated streams to DIR/<kind>-<size>.jsonl and exit (no benchmark runs).");

namespace informerd::client {
namespace {

using bench::SizedPod;

constexpr size_t kStreamBytes = 8 << 20;

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
  const size_t chunk = absl::GetFlag(FLAGS_chunk_bytes);
  std::vector<WatchEvent> events;
  size_t decoded = 0;
  for (auto _ : state) {
    auto decoder = WatchDecoder::Create().value();
    for (size_t at = 0; at < stream.size(); at += chunk) {
      absl::Status s = decoder->Feed(absl::string_view(stream).substr(at, chunk), &events);
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
  // Google Benchmark takes its --benchmark_* flags; Abseil's parser the rest (--help lists them).
  std::vector<char*> benchmark_args = {argv[0]};
  std::vector<char*> flag_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    (absl::StartsWith(argv[i], "--benchmark_") ? benchmark_args : flag_args).push_back(argv[i]);
  }
  informerd::ParseFlags(static_cast<int>(flag_args.size()), flag_args.data(),
                        "decoding of recorded watch streams: informerd's WatchDecoder, its floor "
                        "and simdjson's DOM. Google Benchmark's --benchmark_* flags (such as "
                        "--benchmark_filter=REGEX) are taken too.");
  if (absl::Status s = informerd::CheckRange(FLAGS_chunk_bytes, 1, 16 << 20); !s.ok()) {
    return informerd::FlagError(s);
  }
  if (const std::string dir = absl::GetFlag(FLAGS_write_streams); !dir.empty()) {
    return informerd::client::WriteStreams(dir);
  }
  int benchmark_argc = static_cast<int>(benchmark_args.size());
  benchmark::Initialize(&benchmark_argc, benchmark_args.data());
  if (benchmark::ReportUnrecognizedArguments(benchmark_argc, benchmark_args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
