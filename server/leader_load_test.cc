// The leader keeps its Lease while its cluster's rate limit is saturated: the elector has a
// client of its own (its own connection and no limiter, as kube-controller-manager's), so its
// renewals never wait in the bucket the reflectors, reviews and the queue store share. On the
// code before (one client per cluster), a renewal waited behind every request queued before it:
// with qps 50 / burst 100 and 1,000 EnsureInformer calls, ~38 s, so the Lease ran out while the
// replica still served Work streams.
//
// Scaled to the sanitizers: 200 informers at qps 10 / burst 20 (5 / 20 under the sanitizers)
// keep the bucket full for ~19 s (~38 s), six renew deadlines. Its own binary: it
// serves the Queue resource on its fake API server, which daemon_test's leader tests must not.
#include <signal.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "base/sanitizers.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "server/ha/leader_elector.h"
#include "server/testing/daemon_process.h"

namespace informerd {
namespace {

using ::informerd::testing::DaemonProcess;
using ::informerd::testing::SharedApiServer;
using ::informerd::testing::WriteConfig;

// The Lease's spec.renewTime and holderIdentity (empty when it cannot be read), by the
// elector's own parser.
ha::LeaseRecord ReadLease(client::Client& c) {
  auto lease = c.Get({"coordination.k8s.io", "v1", "leases"}, "ha-load", "load");
  if (!lease.ok()) return {};
  absl::StatusOr<ha::LeaseRecord> record = ha::ParseLease((*lease)->json());
  return record.ok() ? *std::move(record) : ha::LeaseRecord{};
}

constexpr absl::string_view kLeaderSeries = "informerd_leader{lease=\"ha-load/load\"}";

TEST(LeaderLoadTest, RenewalsStayOnTimeWhileTheClustersRateLimitIsSaturated) {
  ASSERT_TRUE(SharedApiServer()
                  ->Control("POST", "/_fake/resources",
                            R"({"group":"informerd.io","version":"v1alpha1","resource":"queues",
                                "kind":"Queue","namespaced":true,"customResource":true})")
                  .ok());
  ASSERT_TRUE(::informerd::testing::SeedConfigMaps("ha-load", 5).ok());
  std::unique_ptr<client::Client> c =
      client::Client::Create({.config = SharedApiServer()->config(), .qps = 0}).value();

  constexpr int kInformers = 200;
  // Under the sanitizers the daemon is several times slower: longer timings, the same margins
  // (and half the rate, so that the backlog still lasts several renew deadlines).
  const absl::Duration renew_deadline = absl::Seconds(kSanitized ? 6 : 3);
  const std::vector<std::string> timings = {
      absl::StrCat("--leader_elect_lease_duration=", kSanitized ? "8s" : "4s"),
      absl::StrCat("--leader_elect_renew_deadline=", kSanitized ? "6s" : "3s"),
      "--leader_elect_retry_period=1s"};
  const std::string config = WriteConfig(
      "load", absl::StrCat("clusters: [{name: fake, kubeconfig: \"",
                           SharedApiServer()->kubeconfig_path(), "\", qps: ", kSanitized ? 5 : 10,
                           ", burst: 20}]\n"));
  std::vector<std::string> flags = {"--config=" + config, "--leader_elect",
                                    "--leader_elect_resource_namespace=ha-load",
                                    "--leader_elect_resource_name=load",
                                    "--leader_elect_identity=loaded"};
  flags.insert(flags.end(), timings.begin(), timings.end());
  absl::StatusOr<DaemonProcess> d = DaemonProcess::Start(flags);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(Eventually([&] { return d->MetricValue(kLeaderSeries) == 1; },
                         absl::Seconds(30)));

  // The flood: EnsureInformer calls whose lists and watches saturate the cluster's bucket.
  std::atomic<int> ensured{0};
  std::atomic<int> failed{0};
  std::vector<std::string> ids(kInformers);
  std::vector<std::thread> callers;
  const absl::Time flood_start = absl::Now();
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      auto stub = v1::Informers::NewStub(d->channel);
      for (int i = t; i < kInformers; i += 8) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        v1::EnsureInformerRequest req;
        req.mutable_spec()->mutable_resource()->set_version("v1");
        req.mutable_spec()->mutable_resource()->set_resource("configmaps");
        req.mutable_spec()->set_namespace_("ha-load");
        req.mutable_spec()->set_label_selector(absl::StrCat("load-", i, "=x"));
        v1::InformerInfo info;
        if (stub->EnsureInformer(&ctx, req, &info).ok()) {
          ids[i] = info.id();
          ++ensured;
        } else {
          ++failed;
        }
      }
    });
  }
  // Meanwhile: every renewal the Lease shows, and whether the replica still leads.
  std::atomic<bool> all_synced{false};
  std::thread syncs([&] {
    for (std::thread& t : callers) t.join();
    auto stub = v1::Informers::NewStub(d->channel);
    for (const std::string& id : ids) {
      if (id.empty()) continue;
      grpc::ClientContext ctx;
      v1::WaitForSyncRequest req;
      req.set_informer_id(id);
      req.set_timeout_ms(180000);
      v1::InformerInfo info;
      (void)stub->WaitForSync(&ctx, req, &info);
    }
    all_synced = true;
  });
  ha::LeaseRecord last = ReadLease(*c);
  absl::Time last_renewal = absl::Now();
  absl::Duration longest_gap = absl::ZeroDuration();
  int renewals = 0;
  int not_leading = 0;
  std::vector<std::string> holders;
  while (!all_synced.load()) {
    absl::SleepFor(absl::Milliseconds(100));  // the sampling period, not a wait for an absence
    const ha::LeaseRecord now = ReadLease(*c);
    if (now.holder != "loaded") holders.push_back(now.holder);
    if (!now.renew_time.empty() && now.renew_time != last.renew_time) {
      longest_gap = std::max(longest_gap, absl::Now() - last_renewal);
      last_renewal = absl::Now();
      last = now;
      ++renewals;
    }
    if (d->MetricValue(kLeaderSeries) != 1) ++not_leading;
  }
  longest_gap = std::max(longest_gap, absl::Now() - last_renewal);
  const absl::Duration flood = absl::Now() - flood_start;
  syncs.join();

  EXPECT_EQ(ensured.load(), kInformers) << failed.load() << " EnsureInformer calls failed";
  // The load was real: the bucket held the informers' requests far longer than a lease.
  EXPECT_GE(flood, 4 * renew_deadline) << "the flood did not saturate the rate limit";
  // Renewals kept their period (1 s) with the bucket full: never a gap of a renew deadline, and
  // the replica led throughout.
  EXPECT_LT(longest_gap, renew_deadline) << renewals << " renewals in " << flood;
  EXPECT_GE(renewals, static_cast<int>(absl::ToInt64Seconds(flood) / 2));
  EXPECT_EQ(not_leading, 0);
  EXPECT_THAT(holders, ::testing::IsEmpty());
  d->process->Signal(SIGTERM);
  ASSERT_TRUE(d->process->Wait(absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace informerd
