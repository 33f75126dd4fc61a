// LeaseTable's rules on a real RateLimitingQueue with a fake clock, driven as the dispatcher and
// a Work stream drive it: credit, outcomes, expiry, the same key handed to the same worker again
// while its expired lease is still unanswered, zero timeouts, give-backs.
#include "server/service/lease_table.h"

#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::service {
namespace {

using workqueue::Lease;

// A sink that keeps what it is given.
class Collect final : public LeaseSink {
 public:
  void Deliver(std::vector<Lease> leases) override {
    for (Lease& l : leases) got.push_back(std::move(l));
  }
  void Close(const absl::Status& status) override { closed.push_back(status); }

  std::vector<Lease> got;
  std::vector<absl::Status> closed;
};

class LeaseTableTest : public ::testing::Test {
 protected:
  explicit LeaseTableTest(absl::Duration lease_timeout = absl::Seconds(10)) {
    queue_ = workqueue::RateLimitingQueue::Create({.name = "t", .clock = &clock_}).value();
    table_ = std::make_unique<LeaseTable>(
        queue_, LeaseTable::Options{.queue_name = "t", .clock = &clock_,
                                    .lease_timeout = lease_timeout});
  }
  ~LeaseTableTest() override { queue_->ShutDown(); }

  std::unique_ptr<Worker> Attach(std::shared_ptr<Collect> sink, uint32_t max_in_flight) {
    return table_->Attach({.max_in_flight = max_in_flight}, sink).value();
  }

  // One dispatcher pass: what one worker could take now, from the queue, assigned.
  size_t Dispatch() {
    const size_t want = table_->AwaitCredit();
    std::vector<Lease> leases;
    if (queue_->TryGetBatch(want, &leases) == 0) return 0;
    const size_t n = leases.size();
    for (LeaseTable::Delivery& d : table_->Assign(&leases)) d.sink->Deliver(std::move(d.leases));
    return n;
  }

  static v1::Outcomes Outcome(const Lease& l, v1::Outcome::Result result = v1::Outcome::SUCCESS) {
    v1::Outcomes out;
    v1::Outcome* o = out.add_outcomes();
    o->set_key(l.key);
    o->set_token(l.token);
    o->set_result(result);
    return out;
  }

  static v1::Heartbeat Beat(const Lease& l) {
    v1::Heartbeat h;
    v1::LeaseRef* ref = h.add_leases();
    ref->set_key(l.key);
    ref->set_token(l.token);
    return h;
  }

  FakeClock clock_;
  std::shared_ptr<workqueue::RateLimitingQueue> queue_;
  std::unique_ptr<LeaseTable> table_;
};

TEST_F(LeaseTableTest, AWorkerIsNeverGivenMoreThanItsCredit) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 2);
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(queue_->Add(k).ok());
  EXPECT_EQ(Dispatch(), 2u);
  ASSERT_EQ(sink->got.size(), 2u);
  EXPECT_EQ(w->in_flight(), 2u);
  // No credit left: nothing more until an outcome.
  EXPECT_EQ(queue_->Len(), 1u);
  EXPECT_TRUE(w->Apply(Outcome(sink->got[0])).empty());
  EXPECT_EQ(w->in_flight(), 1u);
  EXPECT_EQ(Dispatch(), 1u);
  EXPECT_EQ(sink->got.size(), 3u);
  EXPECT_EQ(sink->got[2].key, "c");
}

TEST_F(LeaseTableTest, AnExpiredLeaseKeepsItsCreditAndItsOwnAnswerWhenTheKeyComesBackToTheSameWorker) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 2);
  ASSERT_TRUE(queue_->Add("a").ok());
  ASSERT_EQ(Dispatch(), 1u);
  const Lease first = sink->got[0];
  clock_.Advance(absl::Seconds(11));  // the lease expires; "a" goes back to the queue
  EXPECT_EQ(table_->expired(), 1u);
  EXPECT_EQ(queue_->Len(), 1u);
  // The same worker gets "a" again (it has credit for one more): two leases of one key.
  ASSERT_EQ(Dispatch(), 1u);
  const Lease second = sink->got[1];
  EXPECT_EQ(second.key, "a");
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(w->in_flight(), 2u);  // the hung reconcile still counts
  // Full: nothing more is handed to it.
  ASSERT_TRUE(queue_->Add("b").ok());
  EXPECT_EQ(table_->Held(), 2u);
  // The late answer of the first lease is LEASE_EXPIRED (not a stale token), and frees its credit.
  std::vector<v1::Refusal> refused = w->Apply(Outcome(first));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].reason(), v1::LEASE_EXPIRED);
  EXPECT_EQ(w->in_flight(), 1u);
  // The second lease is still live and answered normally.
  EXPECT_TRUE(w->Heartbeat(Beat(second)).empty());
  EXPECT_TRUE(w->Apply(Outcome(second)).empty());
  EXPECT_EQ(w->in_flight(), 0u);
  EXPECT_EQ(queue_->Processing(), 0u);
}

TEST_F(LeaseTableTest, HeartbeatsKeepALeaseAndAreRefusedOnceItExpired) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 1);
  ASSERT_TRUE(queue_->Add("a").ok());
  ASSERT_EQ(Dispatch(), 1u);
  const Lease l = sink->got[0];
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(8));
    EXPECT_TRUE(w->Heartbeat(Beat(l)).empty());
  }
  EXPECT_EQ(table_->expired(), 0u);
  clock_.Advance(absl::Seconds(10));
  std::vector<v1::Refusal> refused = w->Heartbeat(Beat(l));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].reason(), v1::LEASE_EXPIRED);
  // A token this stream never held is stale; a key it never held is not held.
  Lease other = l;
  other.token += 100;
  refused = w->Apply(Outcome(other));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].reason(), v1::KEY_NOT_HELD);
}

class ZeroTimeoutTest : public LeaseTableTest {
 protected:
  ZeroTimeoutTest() : LeaseTableTest(absl::ZeroDuration()) {}
};

TEST_F(ZeroTimeoutTest, LeasesDoNotExpireAndATimeoutSetLaterAppliesToNewLeasesOnly) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 2);
  ASSERT_TRUE(queue_->Add("a").ok());
  ASSERT_EQ(Dispatch(), 1u);
  clock_.Advance(absl::Hours(24));
  EXPECT_EQ(table_->expired(), 0u);
  table_->SetLeaseTimeout(absl::Seconds(5));
  ASSERT_TRUE(queue_->Add("b").ok());
  ASSERT_EQ(Dispatch(), 1u);
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(table_->expired(), 1u);  // "b" only
  EXPECT_TRUE(w->Apply(Outcome(sink->got[0])).empty());
  // Back to none: the expiry armed for a new lease is dropped.
  ASSERT_TRUE(queue_->Add("c").ok());
  ASSERT_EQ(Dispatch(), 1u);
  table_->SetLeaseTimeout(absl::ZeroDuration());
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(table_->expired(), 1u);
}

TEST_F(LeaseTableTest, GivingBackRequeuesOnceAndAnExpiredUnsentLeaseFreesItsCredit) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 2);
  ASSERT_TRUE(queue_->Add("a").ok());
  ASSERT_TRUE(queue_->Add("b").ok());
  ASSERT_EQ(Dispatch(), 2u);
  clock_.Advance(absl::Seconds(11));  // both expire before the stream sent them
  EXPECT_EQ(queue_->Len(), 2u);
  // The stream ends without sending them: their credit comes back, nothing is added twice.
  w->Drain(sink->got);
  EXPECT_EQ(w->in_flight(), 0u);
  EXPECT_EQ(queue_->Len(), 2u);
  ASSERT_EQ(sink->closed.size(), 1u);
  EXPECT_TRUE(sink->closed[0].ok());
}

TEST_F(LeaseTableTest, TheDispatchersReturnAndADetachPutEveryKeyBack) {
  auto sink = std::make_shared<Collect>();
  std::unique_ptr<Worker> w = Attach(sink, 3);
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(queue_->Add(k).ok());
  std::vector<Lease> leases;
  ASSERT_EQ(queue_->TryGetBatch(1, &leases), 1u);
  table_->Return(leases);  // not handed out (a term that ended): back in the queue
  EXPECT_EQ(queue_->Processing(), 0u);
  EXPECT_EQ(queue_->Len(), 3u);
  EXPECT_EQ(Dispatch(), 3u);
  EXPECT_FALSE(table_->AwaitNoneInFlight(absl::InfinitePast()));
  w->Detach();
  EXPECT_EQ(queue_->Processing(), 0u);
  EXPECT_EQ(queue_->Len(), 3u);
  EXPECT_TRUE(table_->AwaitNoneInFlight(absl::InfinitePast()));
}

}  // namespace
}  // namespace informerd::service
