// LeaderElector against the fake API server's Leases (a real process, real HTTP): one leader at
// a time, hand-over on release, step-down when renewals fail (before anyone else can lead), a new
// term (and epoch) for every acquisition, and the Lease's wire format.
#include "server/ha/leader_elector.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "base/mutex.h"
#include "client/api_error.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/testing/daemon_process.h"

namespace informerd::ha {
namespace {

using ::informerd::testing::SharedApiServer;
using ::testing::HasSubstr;

// What one elector's callbacks saw, in steady-clock order.
struct Log {
  Mutex mu;
  std::vector<Term> started ABSL_GUARDED_BY(mu);
  std::vector<SteadyTime> started_at ABSL_GUARDED_BY(mu);
  std::vector<SteadyTime> stopped_at ABSL_GUARDED_BY(mu);
  std::vector<std::string> leaders ABSL_GUARDED_BY(mu);
  // The last deadline `renewed` (or started_leading) gave.
  SteadyTime deadline ABSL_GUARDED_BY(mu);

  size_t starts() {
    MutexLock l(&mu);
    return started.size();
  }
  size_t stops() {
    MutexLock l(&mu);
    return stopped_at.size();
  }
};

// A candidate's lease, renew deadline and retry period.
struct Timings {
  absl::Duration lease = absl::Milliseconds(2000);
  absl::Duration renew = absl::Milliseconds(1500);
  absl::Duration retry = absl::Milliseconds(250);
};

// One replica: its own client (its User-Agent scopes the faults a test injects) and elector.
struct Candidate {
  std::string identity;
  std::string user_agent;
  std::unique_ptr<client::Client> client;
  Log log;
  std::unique_ptr<LeaderElector> elector;

  Candidate(const std::string& lease, const std::string& id, Timings timings = {},
            std::function<absl::StatusOr<uint64_t>()> epoch_floor = nullptr)
      : identity(id), user_agent(absl::StrCat("elector-", lease, "-", id)) {
    client = client::Client::Create({.config = SharedApiServer()->config(),
                                     .user_agent = user_agent,
                                     .qps = 0})
                 .value();
    elector = std::make_unique<LeaderElector>(
        client.get(),
        ElectorOptions{.lease_namespace = "default",
                       .lease_name = lease,
                       .identity = id,
                       .address = absl::StrCat(id, ".example:7470"),
                       .lease_duration = timings.lease,
                       .renew_deadline = timings.renew,
                       .retry_period = timings.retry,
                       .epoch_floor = std::move(epoch_floor)},
        ElectorCallbacks{
            .started_leading =
                [this](const Term& t) {
                  MutexLock l(&log.mu);
                  log.started.push_back(t);
                  log.started_at.push_back(std::chrono::steady_clock::now());
                  log.deadline = t.deadline;
                },
            .renewed =
                [this](SteadyTime d) {
                  MutexLock l(&log.mu);
                  log.deadline = d;
                },
            .stopped_leading =
                [this] {
                  MutexLock l(&log.mu);
                  log.stopped_at.push_back(std::chrono::steady_clock::now());
                },
            .new_leader =
                [this](const std::string& who, const std::string&) {
                  MutexLock l(&log.mu);
                  log.leaders.push_back(who);
                },
        });
  }
};

std::string ArmFault(const std::string& user_agent) {
  absl::StatusOr<std::string> r = SharedApiServer()->Control(
      "POST", "/_fake/faults",
      absl::StrCat(R"({"type":"internal-error","userAgent":")", user_agent,
                   R"(","count":100000})"));
  EXPECT_TRUE(r.ok()) << r.status();
  // {"id":N,...}
  std::string id;
  if (r.ok()) {
    size_t at = r->find("\"id\":");
    for (size_t i = at + 5; at != std::string::npos && i < r->size() && isdigit((*r)[i]); ++i) {
      id.push_back((*r)[i]);
    }
  }
  return id;
}

TEST(LeaderElectorTest, OneLeaderThenHandOverOnRelease) {
  Candidate a("handover", "a"), b("handover", "b");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  b.elector->Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->leader() == "a"; }, absl::Seconds(20)));
  EXPECT_EQ(b.elector->leader_address(), "a.example:7470");
  // Several retry periods: b never leads while a renews.
  absl::SleepFor(absl::Seconds(2));
  EXPECT_FALSE(b.elector->leading());
  EXPECT_EQ(b.log.starts(), 0u);

  const absl::Time released = absl::Now();
  a.elector->Stop();  // steps down and releases
  EXPECT_EQ(a.log.stops(), 1u);
  // The callback, not leading(): the flag turns true just before started_leading runs.
  ASSERT_TRUE(Eventually([&] { return b.log.starts() == 1; }, absl::Seconds(20)));
  // Released: b does not wait out the lease (2 s), only its retry period.
  EXPECT_LT(absl::Now() - released, absl::Milliseconds(1500));
  MutexLock la(&a.log.mu);
  MutexLock lb(&b.log.mu);
  ASSERT_EQ(a.log.started.size(), 1u);
  ASSERT_EQ(b.log.started.size(), 1u);
  // A new holder is a new term, and its fencing tokens are above the last term's.
  EXPECT_EQ(b.log.started[0].transitions, a.log.started[0].transitions + 1);
  EXPECT_GT(b.log.started[0].epoch, a.log.started[0].epoch);
  EXPECT_LT(a.log.stopped_at[0], b.log.started_at[0]);
}

TEST(LeaderElectorTest, FailedRenewalsStepDownBeforeAnotherReplicaLeads) {
  Candidate a("stepdown", "a"), b("stepdown", "b");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  b.elector->Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->leader() == "a"; }, absl::Seconds(20)));

  // Every request of a's now fails (500): its renewals fail.
  const std::string fault = ArmFault(a.user_agent);
  ASSERT_FALSE(fault.empty());
  ASSERT_TRUE(Eventually([&] { return b.log.starts() == 1; }, absl::Seconds(30)));
  ASSERT_TRUE(Eventually([&] { return a.log.stops() == 1; }, absl::Seconds(10)));
  {
    MutexLock la(&a.log.mu);
    MutexLock lb(&b.log.mu);
    ASSERT_EQ(a.log.stopped_at.size(), 1u);
    ASSERT_EQ(b.log.started_at.size(), 1u);
    // The safety argument: a stopped (and its last deadline passed) before b began.
    EXPECT_LT(a.log.stopped_at[0], b.log.started_at[0]);
    EXPECT_LT(a.log.deadline, b.log.started_at[0]);
    // b waited out the lease from when it last saw a renew: at least the lease duration after
    // a's last deadline was set (deadline = send + 1.5 s; b acquires >= send + 2 s).
    EXPECT_GE(b.log.started_at[0] - a.log.deadline, std::chrono::milliseconds(400));
  }
  EXPECT_FALSE(a.elector->leading());
  ASSERT_TRUE(SharedApiServer()->Control("DELETE", absl::StrCat("/_fake/faults/", fault), "").ok());
  // a follows b once it can read the Lease again.
  ASSERT_TRUE(Eventually([&] { return a.elector->leader() == "b"; }, absl::Seconds(20)));
  EXPECT_FALSE(a.elector->leading());
}

// A Lease PUT that hangs (not fails): the term ends at its deadline, on the watchdog, while the
// renew is still waiting for its answer (request timeout 1 s); the other replica leads after.
TEST(LeaderElectorTest, AHungRenewEndsTheTermAtItsDeadlineNotWhenTheRequestReturns) {
  const Timings timings{.lease = absl::Seconds(3),
                                   .renew = absl::Seconds(2),
                                   .retry = absl::Milliseconds(500)};
  Candidate a("hung", "a", timings), b("hung", "b", timings);
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  b.elector->Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->leader() == "a"; }, absl::Seconds(20)));
  absl::StatusOr<std::string> armed = SharedApiServer()->Control(
      "POST", "/_fake/faults",
      absl::StrCat(R"({"type":"stall","verb":"update","resource":"leases","userAgent":")",
                   a.user_agent, R"(","count":-1})"));
  ASSERT_TRUE(armed.ok()) << armed.status();
  ASSERT_TRUE(Eventually([&] { return a.log.stops() == 1; }, absl::Seconds(20)));
  ASSERT_TRUE(Eventually([&] { return b.log.starts() == 1; }, absl::Seconds(20)));
  {
    MutexLock la(&a.log.mu);
    MutexLock lb(&b.log.mu);
    // At the deadline (not up to a request timeout, or a second hung renew, later), with room
    // for a loaded machine.
    EXPECT_GE(a.log.stopped_at[0], a.log.deadline);
    EXPECT_LT(a.log.stopped_at[0] - a.log.deadline, std::chrono::milliseconds(300));
    EXPECT_LT(a.log.stopped_at[0], b.log.started_at[0]);
  }
  EXPECT_FALSE(a.elector->leading());
  // Stop with a renew hung: returns within the request timeouts (the renew's and the release's).
  const absl::Time stop = absl::Now();
  a.elector->Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(3));
  ASSERT_TRUE(SharedApiServer()->Control("DELETE", "/_fake/faults", "").ok());
}

// SIGTERM's path: Stop steps down at once while the elector's thread waits on a hung request.
TEST(LeaderElectorTest, StopStepsDownAtOnceWhileARequestHangs) {
  const Timings timings{.lease = absl::Seconds(6),
                                   .renew = absl::Seconds(4),
                                   .retry = absl::Milliseconds(500)};
  Candidate a("stophung", "a", timings);
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  absl::StatusOr<std::string> armed = SharedApiServer()->Control(
      "POST", "/_fake/faults",
      absl::StrCat(R"({"type":"stall","verb":"update","resource":"leases","userAgent":")",
                   a.user_agent, R"(","count":-1})"));
  ASSERT_TRUE(armed.ok()) << armed.status();
  // A renew is under way, and hangs (the next one is due within a retry period).
  absl::SleepFor(absl::Milliseconds(700));
  const SteadyTime stop = std::chrono::steady_clock::now();
  std::thread stopper([&] { a.elector->Stop(); });
  ASSERT_TRUE(Eventually([&] { return a.log.stops() == 1; }, absl::Seconds(10)));
  {
    MutexLock l(&a.log.mu);
    EXPECT_LT(a.log.stopped_at[0] - stop, std::chrono::milliseconds(300));
  }
  stopper.join();
  // The renew's timeout (1.5 s) and the release's.
  EXPECT_LT(std::chrono::steady_clock::now() - stop, std::chrono::seconds(4));
  ASSERT_TRUE(SharedApiServer()->Control("DELETE", "/_fake/faults", "").ok());
}

TEST(LeaderElectorTest, TheSameHolderTakingTheLeaseAgainBeginsANewTerm) {
  Candidate a("again", "a");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  const std::string fault = ArmFault(a.user_agent);
  ASSERT_TRUE(Eventually([&] { return a.log.stops() == 1; }, absl::Seconds(20)));
  ASSERT_TRUE(SharedApiServer()->Control("DELETE", absl::StrCat("/_fake/faults/", fault), "").ok());
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 2; }, absl::Seconds(20)));
  MutexLock l(&a.log.mu);
  // client-go would keep leaseTransitions (same holder); informerd counts the new term so that
  // its tokens are above the lost term's.
  EXPECT_EQ(a.log.started[1].transitions, a.log.started[0].transitions + 1);
  EXPECT_GT(a.log.started[1].epoch, a.log.started[0].epoch);
}

// Sends one request with `client` and returns its answer's status.
absl::Status SendLease(client::Client* client, const std::string& method, const std::string& path,
                       const std::string& body) {
  client::HttpRequest request;
  request.method = method;
  request.path = path;
  request.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  request.body = body;
  return client->Send(std::move(request)).status();
}

// Tokens never go backwards: a new term starts above the epoch the Lease records even when the
// wall clock is behind it (a clock stepped back, or a replica set whose quick terms ran ahead of
// the clock), and above the floor recorded outside the Lease after the Lease is deleted (which
// used to start the count, and the epochs, again at 2^40). A floor that cannot be read takes no
// term.
TEST(LeaderElectorTest, ANewTermStartsAboveEveryRecordedEpoch) {
  const std::string path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/epochs";
  const uint64_t ahead =
      static_cast<uint64_t>(absl::GetCurrentTimeNanos()) + 100 * kEpochSpacing;  // ~30 h ahead
  LeaseRecord left{.holder = "gone",
                   .lease_duration_seconds = 1,
                   .transitions = 3,
                   .epoch = ahead,
                   .acquire_time = "2026-01-01T00:00:00.000000Z",
                   .renew_time = "2026-01-01T00:00:00.000000Z"};
  std::unique_ptr<client::Client> admin =
      client::Client::Create({.config = SharedApiServer()->config(), .qps = 0}).value();
  ASSERT_TRUE(SendLease(admin.get(), "POST",
                        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                        LeaseJson("default", "epochs", left))
                  .ok());

  Candidate a("epochs", "a");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  uint64_t a_epoch = 0;
  {
    MutexLock l(&a.log.mu);
    a_epoch = a.log.started[0].epoch;
  }
  EXPECT_GE(a_epoch, ahead + kEpochSpacing);
  a.elector->Stop();
  ASSERT_TRUE(SendLease(admin.get(), "DELETE", path, "").ok());

  // The floor (the stored queues' epochs) cannot be read: no term, no Lease written.
  std::atomic<bool> readable{false};
  std::atomic<int> reads{0};
  Candidate b("epochs", "b", {}, [&]() -> absl::StatusOr<uint64_t> {
    ++reads;
    if (!readable.load()) return absl::UnavailableError("the API server is away");
    return a_epoch;  // what a's term wrote on the objects it stored
  });
  b.elector->Start();
  ASSERT_TRUE(Eventually([&] { return reads.load() >= 3; }, absl::Seconds(20)));
  EXPECT_EQ(b.log.starts(), 0u);
  EXPECT_FALSE(b.elector->leading());
  EXPECT_TRUE(client::IsNotFound(SendLease(admin.get(), "GET", path, "")));
  readable.store(true);
  ASSERT_TRUE(Eventually([&] { return b.log.starts() == 1; }, absl::Seconds(20)));
  MutexLock l(&b.log.mu);
  EXPECT_GE(b.log.started[0].epoch, a_epoch + kEpochSpacing);
}

// A standalone daemon's epoch is its start time (QueueRegistry); a replica set's terms start at
// the wall clock or above, so a daemon moved from standalone to a replica set keeps its tokens
// rising, and the first term over a fresh Lease is not 2^40 any more.
TEST(LeaderElectorTest, ATermsEpochIsNotBelowTheWallClock) {
  const uint64_t before = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  Candidate a("wallclock", "a");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  MutexLock l(&a.log.mu);
  EXPECT_GE(a.log.started[0].epoch, before);
}

// The Lease deleted under a leader (as an operator might): the follower that saw it held must
// not take it before that holder's lease, as last seen renewed, has run out. It used to create
// the Lease at its next try, while the leader led on to its deadline: two leaders at once.
TEST(LeaderElectorTest, ADeletedLeaseIsNotTakenWhileItsHolderMayStillLead) {
  const std::string path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/deleted";
  std::unique_ptr<client::Client> admin =
      client::Client::Create({.config = SharedApiServer()->config(), .qps = 0}).value();
  Candidate a("deleted", "a"), b("deleted", "b");
  a.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a.log.starts() == 1; }, absl::Seconds(20)));
  b.elector->Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->leader() == "a"; }, absl::Seconds(20)));
  // a's renewals fail from now on (so that it steps down at its deadline), and the Lease goes.
  const std::string fault = ArmFault(a.user_agent);
  ASSERT_TRUE(SendLease(admin.get(), "DELETE", path, "").ok());
  ASSERT_TRUE(Eventually([&] { return b.log.starts() == 1; }, absl::Seconds(20)));
  ASSERT_TRUE(Eventually([&] { return a.log.stops() == 1; }, absl::Seconds(20)));
  {
    MutexLock la(&a.log.mu);
    MutexLock lb(&b.log.mu);
    // Never two leaders: a's term ended before b's began.
    EXPECT_LT(a.log.stopped_at[0], b.log.started_at[0]);
    EXPECT_LT(a.log.deadline, b.log.started_at[0]);
  }
  ASSERT_TRUE(SharedApiServer()->Control("DELETE", absl::StrCat("/_fake/faults/", fault), "").ok());
}

TEST(LeaderElectorTest, TwoCandidatesAtOnceGetOneLeader) {
  std::vector<std::unique_ptr<Candidate>> cs;
  for (const char* id : {"x", "y", "z"}) cs.push_back(std::make_unique<Candidate>("race", id));
  for (auto& c : cs) c->elector->Start();
  ASSERT_TRUE(Eventually(
      [&] {
        size_t starts = 0;
        for (auto& c : cs) starts += c->log.starts();
        return starts == 1;
      },
      absl::Seconds(20)));
  absl::SleepFor(absl::Seconds(1));
  int leading = 0, starts = 0;
  for (auto& c : cs) {
    leading += c->elector->leading();
    starts += c->log.starts();
  }
  EXPECT_EQ(leading, 1);
  EXPECT_EQ(starts, 1);
}

TEST(LeaseRecordTest, RoundTripsThroughItsJson) {
  LeaseRecord r{.holder = "a\"b",
                .holder_address = "10.0.0.1:7470",
                .lease_duration_seconds = 15,
                .transitions = 7,
                .epoch = 1234567890123456789ull,
                .acquire_time = "2026-12-01T10:00:00.000000Z",
                .renew_time = "2026-12-01T10:00:02.000000Z",
                .resource_version = "42"};
  absl::StatusOr<LeaseRecord> back = ParseLease(LeaseJson("ns", "lease", r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->holder, r.holder);
  EXPECT_EQ(back->holder_address, r.holder_address);
  EXPECT_EQ(back->lease_duration_seconds, 15);
  EXPECT_EQ(back->transitions, 7);
  EXPECT_EQ(back->epoch, 1234567890123456789ull);
  EXPECT_EQ(back->renew_time, r.renew_time);
  EXPECT_EQ(back->resource_version, "42");
}

TEST(LeaseRecordTest, BadLeasesNameTheField) {
  EXPECT_THAT(ParseLease("not json").status().message(), HasSubstr("not JSON"));
  EXPECT_THAT(ParseLease(R"({"spec":{}})").status().message(), HasSubstr("metadata"));
  EXPECT_THAT(ParseLease(R"({"metadata":{}})").status().message(),
              HasSubstr("metadata.resourceVersion"));
  EXPECT_THAT(
      ParseLease(R"({"metadata":{"resourceVersion":"1"},"spec":{"leaseTransitions":-1}})")
          .status()
          .message(),
      HasSubstr("spec.leaseTransitions"));
  EXPECT_THAT(
      ParseLease(R"({"metadata":{"resourceVersion":"1"},"spec":{"leaseDurationSeconds":"x"}})")
          .status()
          .message(),
      HasSubstr("spec.leaseDurationSeconds"));
  // Out of the API's int32.
  EXPECT_THAT(
      ParseLease(
          R"({"metadata":{"resourceVersion":"1"},"spec":{"leaseDurationSeconds":9000000000000}})")
          .status()
          .message(),
      HasSubstr("spec.leaseDurationSeconds"));
  EXPECT_THAT(
      ParseLease(R"({"metadata":{"resourceVersion":"1"},"spec":{"leaseTransitions":2147483648}})")
          .status()
          .message(),
      HasSubstr("spec.leaseTransitions"));
  EXPECT_TRUE(
      ParseLease(R"({"metadata":{"resourceVersion":"1"},"spec":{"leaseTransitions":2147483647}})")
          .ok());
  EXPECT_THAT(ParseLease(R"({"metadata":{"resourceVersion":"1",)"
                         R"("annotations":{"informerd.io/epoch":"-3"}}})")
                  .status()
                  .message(),
              HasSubstr("metadata.annotations[informerd.io/epoch]: not an unsigned decimal"));
  // An empty Lease (no spec) is free.
  absl::StatusOr<LeaseRecord> empty = ParseLease(R"({"metadata":{"resourceVersion":"1"}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->holder, "");
}

TEST(ElectorOptionsTest, ClientGoRulesNameTheKey) {
  ElectorOptions ok{.identity = "a"};
  EXPECT_TRUE(ValidateElectorOptions(ok).ok());
  ElectorOptions o = ok;
  o.renew_deadline = absl::Seconds(20);
  EXPECT_THAT(ValidateElectorOptions(o).message(), HasSubstr("leaderElection.leaseDuration"));
  o = ok;
  o.retry_period = absl::Seconds(9);
  EXPECT_THAT(ValidateElectorOptions(o).message(), HasSubstr("leaderElection.renewDeadline"));
  // The step-down margin: a lease 400 ms over the renew deadline is too little.
  o = ok;
  o.lease_duration = absl::Milliseconds(4400);
  o.renew_deadline = absl::Seconds(4);
  o.retry_period = absl::Seconds(1);
  EXPECT_THAT(ValidateElectorOptions(o).message(), HasSubstr("at least 500ms"));
  o.lease_duration = absl::Milliseconds(4500);
  EXPECT_TRUE(ValidateElectorOptions(o).ok());
  o = ok;
  o.lease_name = "Not_A_Name";
  EXPECT_THAT(ValidateElectorOptions(o).message(), HasSubstr("leaderElection.lease.name"));
  o = ok;
  o.identity = "";
  EXPECT_THAT(ValidateElectorOptions(o).message(), HasSubstr("leaderElection.identity"));
}

}  // namespace
}  // namespace informerd::ha
