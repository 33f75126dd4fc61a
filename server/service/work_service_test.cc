// Work streams over real gRPC on loopback: keys are never held by two streams at once, a stream
// never holds more than its credit, a stream's end gives its keys to another, and outcomes for
// keys a stream does not hold (or with stale tokens) are refused while the stream goes on.
#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/limits.h"
#include "server/service/queue_test_util.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using testing::QueueServer;
using testing::Spec;
using testing::WorkerStream;

// Which keys some worker holds right now, and the last token each key was handed out with;
// fails the test if two workers hold a key at once or a key's token does not go up.
class ExclusionOracle {
 public:
  void Acquire(const std::string& key, uint64_t token) {
    MutexLock lock(&mu_);
    EXPECT_TRUE(held_.insert(key).second) << key << " held by two streams at once";
    uint64_t& last = last_token_[key];
    EXPECT_GT(token, last) << key << ": token did not go up";
    last = token;
  }
  // Before the outcome is sent: once it is, the key may go to another worker at once.
  void Release(const std::string& key) {
    MutexLock lock(&mu_);
    held_.erase(key);
  }

 private:
  Mutex mu_;
  absl::flat_hash_set<std::string> held_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> last_token_ ABSL_GUARDED_BY(mu_);
};

// Four streams, each holding what it is given for a random few milliseconds (so streams hold
// keys at the same time, up to their credit, across reads) while the same keys are added again
// and again: no key is ever held by two, tokens go up per key, no stream gets more than its
// credit, and every key is finished.
TEST(WorkServiceTest, ConcurrentStreamsNeverHoldAKeyTwiceAndFinishEveryKey) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  constexpr int kKeys = 50;
  constexpr int kRounds = 20;
  constexpr uint32_t kMaxInFlight = 4;
  ExclusionOracle oracle;
  std::atomic<int> processed{0};
  std::atomic<int> most_held{0};
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&, i] {
      WorkerStream w(s.work(), "q", kMaxInFlight, 2);
      ASSERT_NE(w.ReadStarted(), "");
      started.fetch_add(1);
      Mutex mu;
      std::vector<std::pair<v1::Lease, absl::Time>> mine;  // held, with when to answer
      std::atomic<bool> reading{true};
      // Answers what is due; the reader keeps reading meanwhile (one reader, one writer).
      std::thread answerer([&] {
        std::mt19937 rng(i);
        while (reading.load()) {
          std::vector<v1::Outcome> outcomes;
          {
            MutexLock l(&mu);
            const absl::Time now = absl::Now();
            for (auto it = mine.begin(); it != mine.end();) {
              if (it->second > now) {
                ++it;
                continue;
              }
              oracle.Release(it->first.key());
              outcomes.push_back(WorkerStream::Outcome(
                  it->first.key(), it->first.token(),
                  (it->first.token() + i) % 5 == 0 ? v1::Outcome::DONE : v1::Outcome::SUCCESS));
              it = mine.erase(it);
            }
          }
          if (!outcomes.empty()) {
            processed += outcomes.size();
            if (!w.Send(outcomes)) return;
          }
          absl::SleepFor(absl::Microseconds(200));
        }
      });
      std::mt19937 rng(100 + i);
      v1::ProcessResponse r;
      while (!stop.load() && w.Read(&r)) {
        if (!r.has_leases()) continue;
        MutexLock l(&mu);
        for (const v1::Lease& lease : r.leases().leases()) {
          oracle.Acquire(lease.key(), lease.token());
          mine.emplace_back(lease, absl::Now() + absl::Microseconds(rng() % 3000));
        }
        // The stream's view can only lag the server's (answered leases leave `mine` first).
        EXPECT_LE(mine.size(), kMaxInFlight) << "credit exceeded";
        int seen = most_held.load();
        while (static_cast<int>(mine.size()) > seen &&
               !most_held.compare_exchange_weak(seen, static_cast<int>(mine.size()))) {
        }
      }
      reading = false;
      answerer.join();
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
  }, absl::Seconds(30)));
  EXPECT_GE(processed.load(), kKeys);
  // Streams did hold several keys at once (the oracle had something to check).
  EXPECT_GT(most_held.load(), 1);
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

// A worker that sends outcomes the daemon refuses and never reads the refusals: the stream stops
// reading once its unwritten answers pass their bound, and gRPC's flow control holds the worker
// back, so the daemon's buffer stays bounded (it grew by every refusal before).
TEST(WorkServiceTest, AWorkerThatNeverReadsItsRefusalsIsHeldBackNotBuffered) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  const std::string key(8 << 10, 'k');  // each refusal carries the key: ~8 KiB
  constexpr int kMessages = 3000;       // ~24 MiB of refusals if all were buffered
  std::atomic<int> sent{0};
  std::thread writer([&] {
    for (int i = 0; i < kMessages; ++i) {
      if (!w.Send({WorkerStream::Outcome(key, static_cast<uint64_t>(i + 1),
                                         v1::Outcome::SUCCESS)})) {
        return;
      }
      sent.fetch_add(1);
    }
  });
  // The stream reaches its bound and stops reading (it read everything, before).
  int64_t most = 0;
  const bool paused = Eventually(
      [&] {
        most = std::max(most, s.work_service().buffered_control_bytes());
        return s.work_service().paused_streams() == 1;
      },
      absl::Seconds(30));
  const int64_t held = s.work_service().buffered_control_bytes();
  w.Cancel();
  writer.join();
  EXPECT_TRUE(paused) << sent.load() << " messages sent, " << most << " bytes buffered";
  // Paused: past half the bound (it resumes at half); never past the bound plus the one refusal
  // that crossed it.
  EXPECT_GT(held, static_cast<int64_t>(kMaxBufferedControlBytes / 2));
  EXPECT_LE(std::max(most, held), static_cast<int64_t>(kMaxBufferedControlBytes + (16 << 10)));
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

TEST(WorkServiceTest, ForgetAndRequeueAfterForgetsEarlierFailuresWhileRequeueAfterKeepsThem) {
  QueueServer s;
  v1::QueueSpec spec = Spec("q");
  spec.mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(1);
  spec.mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(2);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  // Two failures: the lease says so.
  for (int i = 0; i < 2; ++i) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].requeues(), i);
    ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));
  }
  // "Look again later" as a failure keeps the count ...
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].requeues(), 2);
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::REQUEUE_AFTER, 1));
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].requeues(), 2);
  // ... and after a success it starts over (controller-runtime's Result{RequeueAfter}).
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::FORGET_AND_REQUEUE_AFTER, 1));
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key(), "ns/a");
  EXPECT_EQ(l[0].requeues(), 0);
  EXPECT_EQ(s.NumRequeues("q", "ns/a"), 0);
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
}

TEST(WorkServiceTest, DrainStopsDeliveriesAndEndsTheStreamOnceHeldKeysAreAnswered) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a", "ns/b"}).ok());
  WorkerStream w(s.work(), "q", 2);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> held;
  while (held.size() < 2) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty());
    held.insert(held.end(), l.begin(), l.end());
  }
  ASSERT_TRUE(w.Drain());
  // Keys added now wait for another worker: this one has no credit any more.
  ASSERT_TRUE(s.Add("q", {"ns/c"}).ok());
  ASSERT_TRUE(Eventually([&] { return s.Len("q") == 1; }, absl::Seconds(10)));
  ASSERT_TRUE(w.Send(held[0], v1::Outcome::SUCCESS));
  // Still holding one key: the stream stays open and the answer is applied.
  ASSERT_TRUE(Eventually([&] { return s.State("q").in_flight() == 1; }, absl::Seconds(10)));
  EXPECT_EQ(s.registry().Get("q").value()->Workers().at(0).draining, true);
  ASSERT_TRUE(w.Send(held[1], v1::Outcome::SUCCESS));
  grpc::Status end = w.AwaitEnd();
  EXPECT_TRUE(end.ok()) << end.error_message();
  EXPECT_EQ(s.State("q").in_flight(), 0u);
  EXPECT_EQ(s.Len("q"), 1u);  // ns/c, never handed to the draining stream
  // Nothing was lost: another worker gets ns/c.
  WorkerStream other(s.work(), "q", 1);
  ASSERT_NE(other.ReadStarted(), "");
  std::vector<v1::Lease> l = other.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key(), "ns/c");
}

TEST(WorkServiceTest, DrainOfAStreamHoldingNothingEndsItAtOnce) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  WorkerStream w(s.work(), "q", 4);
  ASSERT_NE(w.ReadStarted(), "");
  ASSERT_TRUE(w.Drain());
  grpc::Status end = w.AwaitEnd();
  EXPECT_TRUE(end.ok()) << end.error_message();
}

TEST(WorkServiceTest, AnExpiredLeaseGoesToAnotherWorkerWithANewTokenAndItsLateOutcomeIsRefused) {
  QueueServer s;
  v1::QueueSpec spec = Spec("q");
  spec.set_lease_timeout_ms(1000);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(s.Add("q", {"ns/hung"}).ok());
  WorkerStream hung(s.work(), "q", 1);
  v1::Started started;
  ASSERT_NE(hung.ReadStarted(&started), "");
  EXPECT_EQ(started.lease_timeout_ms(), 1000);
  std::vector<v1::Lease> first = hung.ReadLeases();
  ASSERT_EQ(first.size(), 1u);
  // The hung worker never answers; after the timeout another worker gets the key.
  WorkerStream other(s.work(), "q", 1);
  ASSERT_NE(other.ReadStarted(), "");
  std::vector<v1::Lease> second = other.ReadLeases();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].key(), "ns/hung");
  EXPECT_GT(second[0].token(), first[0].token());
  EXPECT_EQ(s.State("q").expired_leases(), 1u);
  // The late outcome is refused and does not end the new holder's lease.
  ASSERT_TRUE(hung.Send(first[0], v1::Outcome::SUCCESS));
  std::vector<v1::Refusal> refused = hung.ReadRefusals();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0].message(), HasSubstr("expired"));
  EXPECT_EQ(refused[0].reason(), v1::LEASE_EXPIRED);
  EXPECT_EQ(s.State("q").in_flight(), 1u);
  ASSERT_TRUE(other.Send(second[0], v1::Outcome::SUCCESS));
  EXPECT_TRUE(Eventually([&] { return s.State("q").in_flight() == 0; }, absl::Seconds(10)));
}

TEST(WorkServiceTest, HeartbeatsKeepALeaseFromExpiring) {
  QueueServer s;
  v1::QueueSpec spec = Spec("q");
  spec.set_lease_timeout_ms(1000);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(s.Add("q", {"ns/slow"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  // Three timeouts' worth of work, with a heartbeat every 250 ms.
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end) {
    ASSERT_TRUE(w.Heartbeat(l));
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(s.State("q").expired_leases(), 0u);
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  EXPECT_TRUE(Eventually([&] { return s.State("q").in_flight() == 0; }, absl::Seconds(10)));
  // A heartbeat for a key not held is refused, naming it.
  ASSERT_TRUE(w.Heartbeat(l));
  std::vector<v1::Refusal> refused = w.ReadRefusals();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0].message(), HasSubstr("ns/slow"));
  EXPECT_EQ(refused[0].reason(), v1::KEY_NOT_HELD);
}

// A second registry in the same process (what a daemon's restart starts from: a new epoch).
// The real restart — a daemon killed and started again — is DaemonTest.WorkersFinishAfterTheDaemonRestarts.
TEST(WorkServiceTest, ANewRegistrysEpochAndTokensAreAboveTheLastRegistrysTokens) {
  uint64_t last = 0;
  uint64_t first_epoch = 0;
  {
    QueueServer s;
    ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
    ASSERT_TRUE(s.Add("q", {"ns/a", "ns/b", "ns/c"}).ok());
    WorkerStream w(s.work(), "q", 8);
    v1::Started started;
    ASSERT_NE(w.ReadStarted(&started), "");
    first_epoch = started.epoch();
    EXPECT_GT(first_epoch, 0u);
    size_t got = 0;
    while (got < 3) {
      for (const v1::Lease& l : w.ReadLeases()) {
        EXPECT_GT(l.token(), first_epoch);
        last = std::max(last, l.token());
        ++got;
      }
    }
  }
  // A new registry (the daemon restarted): its epoch and every token are above the old tokens.
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  v1::Started started;
  ASSERT_NE(w.ReadStarted(&started), "");
  EXPECT_GT(started.epoch(), last);
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_GT(l[0].token(), last);
}

TEST(WorkServiceTest, UpdateQueueKeepsWaitingKeysHeldLeasesAndRetryCounts) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/held", "ns/failed"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  // ns/failed fails twice (the default limiter's 5 ms, 10 ms), then ns/held is held.
  std::vector<v1::Lease> l;
  for (int failures = 0; failures < 2;) {
    l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    if (l[0].key() == "ns/failed") {
      ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));
      ++failures;
    } else {
      ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));  // ns/held comes back too
    }
  }
  ASSERT_TRUE(Eventually([&] { return s.NumRequeues("q", "ns/failed") == 2; }, absl::Seconds(10)));
  // An equal spec is a no-op; a changed one is applied in place.
  v1::QueueSpec next = Spec("q");
  next.mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(1);
  next.mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(1000);
  next.set_lease_timeout_ms(60000);
  v1::QueueInfo info;
  ASSERT_TRUE(s.UpdateQueue(next, false, &info).ok());
  EXPECT_EQ(info.spec().lease_timeout_ms(), 60000);
  EXPECT_TRUE(info.spec().rate_limiter().has_exponential());
  EXPECT_EQ(s.NumRequeues("q", "ns/failed"), 2);
  EXPECT_EQ(s.State("q").workers(), 1u);
  // The stream goes on: the next leases are answered without refusal, and the retry history
  // carries on under the new limiter.
  std::set<std::string> done;
  while (done.size() < 2) {
    l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
    done.insert(l[0].key());
  }
  EXPECT_TRUE(Eventually([&] { return s.State("q").in_flight() == 0; }, absl::Seconds(10)));
  EXPECT_EQ(s.State("q").depth(), 0u);
  // UpdateQueue of a missing queue: NOT_FOUND, unless allow_missing.
  EXPECT_EQ(s.UpdateQueue(Spec("other")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(s.UpdateQueue(Spec("other"), /*allow_missing=*/true).ok());
  // A bad spec changes nothing and names the field.
  v1::QueueSpec bad = Spec("q");
  bad.set_lease_timeout_ms(5);
  grpc::Status st = s.UpdateQueue(bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.lease_timeout_ms"));
}

TEST(WorkServiceTest, BadHeartbeatsAndOutcomesAreRefusedAndTheStreamGoesOn) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  v1::Lease stale = l[0];
  stale.set_token(stale.token() - 1);
  ASSERT_TRUE(w.Heartbeat({stale}));
  std::vector<v1::Refusal> refused = w.ReadRefusals();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0].message(), HasSubstr("stale token"));
  EXPECT_EQ(refused[0].reason(), v1::STALE_TOKEN);
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::FORGET_AND_REQUEUE_AFTER, -1));
  refused = w.ReadRefusals();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0].message(), HasSubstr("requeue_after_ms"));
  EXPECT_EQ(refused[0].reason(), v1::INVALID_FIELD);
  EXPECT_EQ(refused[0].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  EXPECT_TRUE(Eventually([&] { return s.State("q").in_flight() == 0; }, absl::Seconds(10)));
}

}  // namespace
}  // namespace informerd::service
