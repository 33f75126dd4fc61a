// Work streams over real gRPC on loopback: keys are never held by two streams at once, a stream
// never holds more than its credit, a stream's end gives its keys to another, and outcomes for
// keys a stream does not hold (or with stale tokens) are refused while the stream goes on.
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/queue_test_util.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using testing::QueueServer;
using testing::Spec;
using testing::WorkerStream;

// Which keys some worker holds right now; fails the test if two hold one.
class ExclusionOracle {
 public:
  void Acquire(const std::string& key) {
    MutexLock lock(&mu_);
    EXPECT_TRUE(held_.insert(key).second) << key << " held by two streams at once";
  }
  void Release(const std::string& key) {
    MutexLock lock(&mu_);
    held_.erase(key);
  }

 private:
  Mutex mu_;
  absl::flat_hash_set<std::string> held_ ABSL_GUARDED_BY(mu_);
};

TEST(WorkServiceTest, ConcurrentStreamsNeverHoldAKeyTwiceAndFinishEveryKey) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  constexpr int kKeys = 50;
  constexpr int kRounds = 20;
  constexpr uint32_t kMaxInFlight = 4;
  ExclusionOracle oracle;
  std::atomic<int> processed{0};
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&, i] {
      WorkerStream w(s.work(), "q", kMaxInFlight, 2);
      ASSERT_NE(w.ReadStarted(), "");
      started.fetch_add(1);
      size_t held = 0;
      v1::ProcessResponse r;
      while (!stop.load() && w.Read(&r)) {
        if (!r.has_leases()) continue;
        held += r.leases().leases_size();
        EXPECT_LE(held, kMaxInFlight) << "credit exceeded";
        std::vector<v1::Outcome> outcomes;
        for (const v1::Lease& l : r.leases().leases()) {
          oracle.Acquire(l.key());
          std::this_thread::yield();
          oracle.Release(l.key());
          outcomes.push_back(WorkerStream::Outcome(l.key(), l.token(),
                                                   (l.token() + i) % 5 == 0 ? v1::Outcome::DONE
                                                                            : v1::Outcome::SUCCESS));
        }
        held -= outcomes.size();
        processed += outcomes.size();
        if (!w.Send(outcomes)) break;
      }
    });
  }
  // Every stream is attached before keys arrive: otherwise three streams could finish the work
  // and the queue be shut down before the fourth one starts.
  ASSERT_TRUE(Eventually([&] { return started.load() == 4; }, absl::Seconds(10)));
  // Keys are added again and again while being processed (add-while-processing everywhere).
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::string> keys;
    for (int k = 0; k < kKeys; ++k) keys.push_back(absl::StrCat("ns/k", k));
    ASSERT_TRUE(s.Add("q", keys).ok());
  }
  EXPECT_TRUE(Eventually([&] {
    v1::QueueState st = s.State("q");
    return st.depth() == 0 && st.in_flight() == 0;
  }, absl::Seconds(10)));
  EXPECT_GE(processed.load(), kKeys);
  stop = true;
  s.registry().ShutDownAll(absl::ZeroDuration());
  for (auto& t : workers) t.join();
}

TEST(WorkServiceTest, AStreamNeverHoldsMoreThanItsCredit) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  std::vector<std::string> keys;
  for (int k = 0; k < 10; ++k) keys.push_back(absl::StrCat("ns/k", k));
  ASSERT_TRUE(s.Add("q", keys).ok());
  WorkerStream w(s.work(), "q", 3);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> held;
  while (held.size() < 3) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty());
    held.insert(held.end(), l.begin(), l.end());
  }
  ASSERT_EQ(held.size(), 3u);
  auto queue = s.registry().Get("q").value();
  EXPECT_EQ(queue->HeldByWorkers(), 3u);
  EXPECT_EQ(s.State("q").depth(), 7u);
  ASSERT_TRUE(w.Send(held[0], v1::Outcome::SUCCESS));
  std::vector<v1::Lease> next = w.ReadLeases();
  EXPECT_EQ(next.size(), 1u) << "one key of credit freed, one key delivered";
  EXPECT_EQ(queue->HeldByWorkers(), 3u);
  EXPECT_EQ(s.State("q").depth(), 6u);
}

TEST(WorkServiceTest, ACancelledStreamsKeysAreRedeliveredToAnotherStreamWithinASecond) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a", "ns/b", "ns/c"}).ok());
  auto a = std::make_unique<WorkerStream>(s.work(), "q", 3);
  ASSERT_NE(a->ReadStarted(), "");
  std::set<std::string> got_a;
  while (got_a.size() < 3) {
    for (const v1::Lease& l : a->ReadLeases()) got_a.insert(l.key());
  }
  WorkerStream b(s.work(), "q", 10);
  ASSERT_NE(b.ReadStarted(), "");
  const absl::Time cancelled = absl::Now();
  a->context().TryCancel();  // mid-item: no outcome was sent
  std::set<std::string> got_b;
  while (got_b.size() < 3) {
    std::vector<v1::Lease> l = b.ReadLeases();
    ASSERT_FALSE(l.empty());
    for (const v1::Lease& x : l) got_b.insert(x.key());
  }
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(1));
  EXPECT_EQ(got_b, got_a);
  a.reset();
}

TEST(WorkServiceTest, OutcomesForKeysNotHeldOrWithStaleTokensAreRefusedAndTheStreamGoesOn) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  ASSERT_TRUE(w.Send({WorkerStream::Outcome("ns/other", 1, v1::Outcome::SUCCESS),
                      WorkerStream::Outcome("ns/a", l[0].token() + 7, v1::Outcome::SUCCESS),
                      WorkerStream::Outcome("ns/a", l[0].token(), v1::Outcome::RESULT_UNSPECIFIED)}));
  v1::ProcessResponse r;
  ASSERT_TRUE(w.Read(&r));
  ASSERT_TRUE(r.has_refusals());
  ASSERT_EQ(r.refusals().refusals_size(), 3);
  EXPECT_EQ(r.refusals().refusals(0).code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_THAT(r.refusals().refusals(0).message(), HasSubstr("not held by this stream"));
  EXPECT_EQ(r.refusals().refusals(1).code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_THAT(r.refusals().refusals(1).message(), HasSubstr("stale token"));
  EXPECT_EQ(r.refusals().refusals(2).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  // Still held: the right outcome is applied, and a repeat of it is refused.
  ASSERT_TRUE(w.Send({WorkerStream::Outcome("ns/a", l[0].token(), v1::Outcome::SUCCESS),
                      WorkerStream::Outcome("ns/a", l[0].token(), v1::Outcome::SUCCESS)}));
  ASSERT_TRUE(w.Read(&r));
  ASSERT_TRUE(r.has_refusals());
  ASSERT_EQ(r.refusals().refusals_size(), 1);
  EXPECT_THAT(r.refusals().refusals(0).message(), HasSubstr("not held"));
  EXPECT_TRUE(Eventually([&] { return s.State("q").in_flight() == 0; }, absl::Seconds(10)));
  // And the stream goes on delivering.
  ASSERT_TRUE(s.Add("q", {"ns/b"}).ok());
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key(), "ns/b");
}

TEST(WorkServiceTest, RequeueAfterAndRetryOutcomesAddTheKeyAgain) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::REQUEUE_AFTER, 100));
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(100));
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].requeues(), 1);
}

TEST(WorkServiceTest, BadStartsEndTheStreamWithTheirStatus) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  {
    grpc::ClientContext ctx;
    auto stream = s.work().Process(&ctx);
    v1::ProcessRequest req;
    req.mutable_outcomes();
    stream->Write(req);
    stream->WritesDone();
    v1::ProcessResponse r;
    while (stream->Read(&r)) {
    }
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("start"));
  }
  {
    WorkerStream w(s.work(), "q", 0);
    grpc::Status st = w.Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("start.max_in_flight"));
  }
  {
    WorkerStream w(s.work(), "q", 100001);
    EXPECT_EQ(w.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    WorkerStream w(s.work(), "missing", 1);
    grpc::Status st = w.Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(st.error_message(), HasSubstr("missing"));
  }
}

TEST(WorkServiceTest, ServerShutdownEndsStreamsAfterInFlightKeysFinish) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  std::thread shutdown([&] { s.registry().ShutDownAll(absl::Seconds(10)); });
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  shutdown.join();
  EXPECT_EQ(s.registry().Get("q").value()->State().in_flight(), 0u);
  grpc::Status st = w.Finish();
  EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

}  // namespace
}  // namespace informerd::service
