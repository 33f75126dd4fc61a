// many_informers: ensures N informers on a running daemon at once, as N controllers starting
// together would, and times each from its EnsureInformer call until WaitForSync answers synced.
// `make bench-service` runs it against a daemon it started and reads the daemon's threads and
// RSS from /proc before and after (the row "1,000 informers").
//
//   bazel run //bench:many_informers -- --target=127.0.0.1:50051 --informers=1000 --json
//
// Informer i watches the ConfigMaps of namespace "<namespace_prefix>-<i>" (present or not: a
// namespace with nothing in it syncs to an empty cache), so every informer is a distinct one with
// its own list and watch.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "bench/latency_histogram.h"
#include "grpcpp/grpcpp.h"
#include "informerd/v1/informers.grpc.pb.h"

ABSL_FLAG(std::string, target, "", "The daemon's gRPC address, host:port (required).");
ABSL_FLAG(int, informers, 1000, "How many informers to ensure (1..100000).");
ABSL_FLAG(int, concurrency, 64, "EnsureInformer + WaitForSync calls in flight (1..1024).");
ABSL_FLAG(std::string, namespace_prefix, "many", "Informer i watches namespace <prefix>-<i>.");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(5), "Give up on an informer's sync after this.");
ABSL_FLAG(bool, json, false, "Print one JSON line instead of the table.");

namespace informerd::bench {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "many_informers: %s\n", message.c_str());
  return 2;
}

int Run() {
  const std::string target = absl::GetFlag(FLAGS_target);
  const int n = absl::GetFlag(FLAGS_informers);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (target.empty()) return FlagError(MissingFlag(FLAGS_target, "the daemon's host:port"));
  for (const absl::Status& s :
       {CheckRange(FLAGS_informers, 1, 100000), CheckRange(FLAGS_concurrency, 1, 1024),
        CheckPositive(FLAGS_timeout)}) {
    if (!s.ok()) return FlagError(s);
  }

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    return Fail(absl::StrCat("cannot connect to --target=", target, " within 10s"));
  }
  std::unique_ptr<v1::Informers::Stub> stub = v1::Informers::NewStub(channel);

  std::atomic<int> next{0};
  absl::Mutex mu;
  LatencyHistogram synced;  // guarded by mu
  std::vector<std::string> errors;  // guarded by mu
  const absl::Time start = absl::Now();
  std::vector<std::thread> callers;
  for (int c = 0; c < concurrency; ++c) {
    callers.emplace_back([&] {
      LatencyHistogram mine;
      for (int i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        const absl::Time begun = absl::Now();
        v1::EnsureInformerRequest ensure;
        ensure.mutable_spec()->mutable_resource()->set_version("v1");
        ensure.mutable_spec()->mutable_resource()->set_resource("configmaps");
        ensure.mutable_spec()->set_namespace_(
            absl::StrCat(absl::GetFlag(FLAGS_namespace_prefix), "-", i));
        v1::InformerInfo info;
        grpc::ClientContext ensure_ctx;
        grpc::Status s = stub->EnsureInformer(&ensure_ctx, ensure, &info);
        if (s.ok()) {
          v1::WaitForSyncRequest wait;
          wait.set_informer_id(info.id());
          grpc::ClientContext wait_ctx;
          wait_ctx.set_deadline(absl::ToChronoTime(begun + timeout));
          s = stub->WaitForSync(&wait_ctx, wait, &info);
        }
        if (s.ok() && !info.state().synced()) {
          s = grpc::Status(grpc::DEADLINE_EXCEEDED, "not synced within --timeout");
        }
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (errors.size() < 10) {
            errors.push_back(absl::StrCat("informer ", i, ": ", s.error_message()));
          }
          continue;
        }
        mine.Record(absl::ToInt64Nanoseconds(absl::Now() - begun));
      }
      absl::MutexLock lock(&mu);
      synced.Merge(mine);
    });
  }
  for (std::thread& t : callers) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  absl::MutexLock lock(&mu);
  const double ms = 1e-6;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"informers\":%d,\"synced\":%llu,\"errors\":%zu,\"all_synced_seconds\":%.3f,"
        "\"sync_ms_p50\":%.1f,\"sync_ms_p99\":%.1f,\"sync_ms_max\":%.1f}\n",
        n, static_cast<unsigned long long>(synced.count()), errors.size(), seconds,
        synced.Percentile(50) * ms, synced.Percentile(99) * ms, synced.max() * ms);
  } else {
    std::printf("informers ensured     %d\n", n);
    std::printf("synced                %llu\n", static_cast<unsigned long long>(synced.count()));
    std::printf("all synced after      %.2f s\n", seconds);
    std::printf("ensure -> synced      p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
                synced.Percentile(50) * ms, synced.Percentile(99) * ms, synced.max() * ms);
  }
  for (const std::string& e : errors) std::fprintf(stderr, "many_informers: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace informerd::bench

int main(int argc, char** argv) {
  informerd::ParseFlags(
      argc, argv,
      "ensures --informers informers on a running informerd at once and times their sync.");
  return informerd::bench::Run();
}
