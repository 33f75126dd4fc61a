// bench/load as its users run it: against a real informerd on the fake API server (plain HTTP,
// as --apiserver takes), preparing what it drives and ending with its summary.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/testing/daemon_process.h"
#include "server/testing/subprocess.h"

namespace informerd::bench {
namespace {

using ::informerd::client::testing::FakeApiServer;
using ::informerd::testing::DaemonProcess;
using ::informerd::testing::Runfile;
using ::informerd::testing::Subprocess;
using ::informerd::testing::WriteConfig;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// bench/load run with `flags`: its exit code and stdout, the summary (the progress line goes to
// stderr).
Subprocess::Finished Load(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {Runfile("bench/load")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<Subprocess::Finished> r = Subprocess::Run(std::move(argv), absl::Seconds(150));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.value_or(Subprocess::Finished{});
}

// The summary table's row for `what` (its cells), or empty when there is none.
std::vector<std::string> Row(const std::string& out, const std::string& what) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&rest, what)) continue;
    return absl::StrSplit(rest, ' ', absl::SkipEmpty());
  }
  return {};
}

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<FakeApiServer>> api = FakeApiServer::Start({.tls = false});
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    ASSERT_THAT(api_->url(), StartsWith("http://"));
    absl::StatusOr<DaemonProcess> d = DaemonProcess::Start({"--config=" + WriteConfig(
        "load", absl::StrCat("clusters: [{name: fake, kubeconfig: ", api_->kubeconfig_path(),
                             "}]\n"))});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  std::unique_ptr<FakeApiServer> api_;
  DaemonProcess daemon_;
};

TEST_F(LoadTest, WithApiserverItCreatesAMissingNamespaceAndEndsWithASummaryTable) {
  ASSERT_FALSE(api_->Control("GET", "/api/v1/namespaces/load-fresh").ok())
      << "the namespace exists before the run";
  const Subprocess::Finished r = Load({"--target=" + daemon_.grpc, "--resource=v1/configmaps",
                      "--namespace=load-fresh", "--queue=cms", "--bind", "--adders=0",
                      "--apiserver=" + api_->url(), "--change_rate=50", "--change_objects=5",
                      "--subscribers=2", "--duration=2s"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<std::string> ns = api_->Control("GET", "/api/v1/namespaces/load-fresh");
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_THAT(*ns, HasSubstr(R"("name":"load-fresh")"));
  // The table: a header, then a row per kind of work with its count, rate and latency.
  EXPECT_THAT(r.output, ContainsRegex("count +per second +latency +p50 +p90 +p99 +max +notes"));
  const std::vector<std::string> changes = Row(r.output, "changes");
  ASSERT_GE(changes.size(), 3u) << r.output;
  EXPECT_GT(std::stoi(changes[0]), 0) << r.output;  // count
  EXPECT_THAT(r.output, HasSubstr("0 errors")) << "no change failed";
  const std::vector<std::string> keys = Row(r.output, "keys completed");
  ASSERT_GE(keys.size(), 5u) << r.output;
  EXPECT_GT(std::stoi(keys[0]), 0) << r.output;
  EXPECT_EQ(keys[2], "add") << r.output;  // latency "add -> delivery", then its p50 in ms
  EXPECT_THAT(r.output, ContainsRegex("watch events +[1-9][0-9]* .* change -> event .* ms .* 0 "
                                   "re-snapshots"));
  EXPECT_THAT(r.output, ContainsRegex("informer [0-9a-z-]+: 5 objects"));

  // Run again: the namespace and the objects exist now, and are reused.
  const Subprocess::Finished again = Load({"--target=" + daemon_.grpc, "--resource=v1/configmaps",
                          "--namespace=load-fresh", "--adders=0", "--apiserver=" + api_->url(),
                          "--change_rate=20", "--change_objects=5", "--duration=1s", "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, StartsWith(R"({"seconds":)"));
  EXPECT_THAT(again.output, HasSubstr(R"("change_errors":0,)"));
  EXPECT_THAT(again.output, HasSubstr(R"("informer_objects":5,)"));
  EXPECT_THAT(again.output, HasSubstr(R"("errors":[])"));
}

TEST_F(LoadTest, AQueueRunDrainsWhatItAddsAndSaysSoInTheTable) {
  const Subprocess::Finished r = Load({"--target=" + daemon_.grpc, "--queue=plain", "--keys=100", "--prefill",
                      "--adders=0", "--workers=2", "--batch=8", "--duration=5s",
                      "--delete_queue"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("queue plain: 2 workers, batch 8, in flight 8; 0 keys added (and 100 before the run)"));
  const std::vector<std::string> keys = Row(r.output, "keys completed");
  ASSERT_GE(keys.size(), 1u) << r.output;
  EXPECT_EQ(keys[0], "100") << r.output;
  EXPECT_THAT(r.output, HasSubstr("0 add errors, 0 refusals"));
}

}  // namespace
}  // namespace informerd::bench
