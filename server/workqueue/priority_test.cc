// Priorities of Queue, DelayingQueue and RateLimitingQueue, against controller-runtime's
// priorityqueue (pkg/controller/priorityqueue, its default queue since v0.23): each test named
// CrSomething is one of priorityqueue_test.go's cases ("returns an item", ...,
// TestHighPriorityItemsAreReturnedBeforeLowPriorityItemMultipleTimes) on this queue. Where
// informerd answers otherwise the test says so and why, each time because informerd keeps
// client-go's workqueue rules, which its users already rely on: a delayed add is a later add of
// its own, not a deadline merged into the waiting key's (CrRetainsTheLowestAfterDuration,
// CrWaitingItemIsReturnedRightAfterReadWithoutAfter); a key added while processed joins the back
// when it is Done, instead of keeping the place of its first add
// (CrReturnsAnItemAsSoonAsItsUnlocked); Len counts only keys that can be handed out now
// (CrEnqueuesALockedItem). The rest are informerd's own rules: aging, and priorities through
// processing and delays.
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/workqueue/delaying_queue.h"
#include "server/workqueue/queue.h"
#include "server/workqueue/rate_limiter.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::workqueue {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

class PriorityTest : public ::testing::Test {
 protected:
  std::unique_ptr<DelayingQueue> NewQueue(absl::Duration aging = absl::InfiniteDuration()) {
    return DelayingQueue::Create(
               {.clock = &clock_, .timer_slack = absl::ZeroDuration(), .priority_aging = aging})
        .value();
  }
  // The next key and the priority it waited at (the queue must not be empty).
  static std::pair<std::string, int32_t> Next(Queue& q) {
    Lease lease;
    EXPECT_TRUE(q.Get(&lease));
    return {lease.key, lease.priority};
  }
  FakeClock clock_;
};

TEST_F(PriorityTest, CrReturnsAnItem) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_THAT(Next(*q), Pair("foo", 0));
}

TEST_F(PriorityTest, CrReturnsItemsInOrder) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  ASSERT_TRUE(q->Add("bar").ok());
  EXPECT_EQ(Next(*q).first, "foo");
  EXPECT_EQ(Next(*q).first, "bar");
}

TEST_F(PriorityTest, CrDoesntReturnAnItemThatIsCurrentlyLocked) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_EQ(Next(*q).first, "foo");
  ASSERT_TRUE(q->Add("foo").ok());
  ASSERT_TRUE(q->Add("bar").ok());
  EXPECT_EQ(Next(*q).first, "bar");
  EXPECT_EQ(q->Len(), 0u);  // foo waits for its Done
}

TEST_F(PriorityTest, CrReturnsAnItemAsSoonAsItsUnlocked) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_EQ(Next(*q).first, "foo");
  ASSERT_TRUE(q->Add("foo").ok());
  ASSERT_TRUE(q->Add("bar").ok());
  EXPECT_EQ(Next(*q).first, "bar");
  ASSERT_TRUE(q->Add("baz").ok());
  ASSERT_TRUE(q->Done("foo").ok());
  // controller-runtime hands foo out here, before baz: an unlocked item keeps its place by when
  // it was added. Here (client-go's rule) a key added while processed joins the back at Done.
  EXPECT_EQ(Next(*q).first, "baz");
  EXPECT_EQ(Next(*q).first, "foo");
}

TEST_F(PriorityTest, CrDeDuplicatesItems) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_EQ(q->Len(), 1u);
}

TEST_F(PriorityTest, CrEnqueuesALockedItem) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_EQ(q->Len(), 1u);
  EXPECT_THAT(Next(*q), Pair("foo", 0));
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_EQ(q->Len(), 0u);  // waiting for Done (controller-runtime counts it: 1)
  ASSERT_TRUE(q->Done("foo").ok());
  EXPECT_EQ(q->Len(), 1u);
  EXPECT_THAT(Next(*q), Pair("foo", 0));
}

TEST_F(PriorityTest, CrRetainsTheHighestPriority) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo", 1).ok());
  ASSERT_TRUE(q->Add("foo", 2).ok());
  EXPECT_THAT(Next(*q), Pair("foo", 2));
  EXPECT_EQ(q->Len(), 0u);
}

TEST_F(PriorityTest, CrWillNotDecreaseThePriority) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo", 2).ok());
  ASSERT_TRUE(q->Add("foo", 1).ok());
  EXPECT_THAT(Next(*q), Pair("foo", 2));
  EXPECT_EQ(q->Len(), 0u);
}

TEST_F(PriorityTest, CrGetsPushedToTheFrontIfThePriorityIncreases) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo").ok());
  ASSERT_TRUE(q->Add("bar").ok());
  ASSERT_TRUE(q->Add("baz").ok());
  ASSERT_TRUE(q->Add("baz", 1).ok());
  EXPECT_THAT(Next(*q), Pair("baz", 1));
  EXPECT_EQ(q->Len(), 2u);
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(0, 2u)));
}

TEST_F(PriorityTest, CrRetainsTheLowestAfterDuration) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::ZeroDuration()).ok());
  ASSERT_TRUE(q->AddAfter("foo", absl::Hours(1)).ok());
  EXPECT_THAT(Next(*q), Pair("foo", 0));
  EXPECT_EQ(q->Len(), 0u);
  // Differs: controller-runtime merges the two into one item, ready at the earlier time. Here the
  // delayed add is a later add of its own (client-go's delaying queue, which informerd's
  // AddAfter and requeue_after keep): after the hour the key is handed out again.
  ASSERT_TRUE(q->Done("foo").ok());
  EXPECT_EQ(q->Waiting(), 1u);
  clock_.Advance(absl::Hours(1));
  EXPECT_THAT(Next(*q), Pair("foo", 0));
}

TEST_F(PriorityTest, CrDoesntIncludeNonReadyItemsInLen) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::Minutes(1)).ok());
  ASSERT_TRUE(q->Add("baz").ok());
  ASSERT_TRUE(q->AddAfter("bar", absl::Minutes(1)).ok());
  ASSERT_TRUE(q->Add("bal").ok());
  EXPECT_EQ(q->Len(), 2u);
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(0, 2u)));
}

TEST_F(PriorityTest, CrFollowsFifoOrderInTheNewPriorityQueueWhenItemPriorityChanges) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo", 0).ok());
  ASSERT_TRUE(q->Add("bar", 1).ok());
  ASSERT_TRUE(q->Add("foo", 1).ok());
  EXPECT_EQ(q->Len(), 2u);
  EXPECT_THAT(Next(*q), Pair("bar", 1));
  EXPECT_EQ(q->Len(), 1u);
  EXPECT_THAT(Next(*q), Pair("foo", 1));
  EXPECT_EQ(q->Len(), 0u);
}

TEST_F(PriorityTest, CrHighPriorityItemsAreReturnedBeforeLowPriorityItemMultipleTimes) {
  for (absl::Duration after : {absl::Seconds(-1), absl::ZeroDuration(), absl::Seconds(1)}) {
    SCOPED_TRACE(absl::StrCat("after=", absl::FormatDuration(after)));
    auto q = NewQueue();
    constexpr int kItemsPerPriority = 1000;
    const std::vector<std::pair<std::string, int32_t>> priorities = {
        {"high", 10}, {"upperMiddle", 5}, {"middle", 0}, {"lowMiddle", -5}, {"low", -10}};
    for (int i = 0; i < kItemsPerPriority; ++i) {
      for (const auto& [name, priority] : priorities) {
        ASSERT_TRUE(q->AddAfter(absl::StrCat(name, "-", i), after, priority).ok());
      }
    }
    if (after > absl::ZeroDuration()) clock_.Advance(after);
    for (const auto& [name, priority] : priorities) {
      for (int i = 0; i < kItemsPerPriority; ++i) {
        ASSERT_THAT(Next(*q), Pair(absl::StrCat(name, "-", i), priority));
      }
    }
  }
}

TEST_F(PriorityTest, CrItemIsOnlyReturnedAfterAfterHasPassed) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::Seconds(1)).ok());
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(clock_.NextDeadline(), clock_.Now() + absl::Seconds(1));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Next(*q), Pair("foo", 0));
}

TEST_F(PriorityTest, CrHighPriorityItemThatBecameReadyIsReturnedBeforeLowPriorityItem) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::ZeroDuration(), -100).ok());
  ASSERT_TRUE(q->AddAfter("prio", absl::Seconds(1), 0).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Next(*q), Pair("prio", 0));
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(-100, 1u)));
}

TEST_F(PriorityTest, CrItemIsReturnedAsSoonAsPossible) {
  auto q = NewQueue();
  std::string got;
  std::thread getter([&] { got = Next(*q).first; });
  while (q->ParkedGetters() == 0) std::this_thread::yield();
  ASSERT_TRUE(q->Add("foo").ok());
  getter.join();
  EXPECT_EQ(got, "foo");
}

TEST_F(PriorityTest, CrWaitingItemIsReturnedRightAfterReadWithoutAfter) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::Minutes(1)).ok());
  EXPECT_EQ(q->Len(), 0u);
  ASSERT_TRUE(q->Add("foo").ok());
  EXPECT_THAT(Next(*q), Pair("foo", 0));
  // Differs as in CrRetainsTheLowestAfterDuration: the delayed add still comes, after its minute.
  ASSERT_TRUE(q->Done("foo").ok());
  EXPECT_EQ(q->Waiting(), 1u);
}

TEST_F(PriorityTest, CrMultipleItemsWithAfterAreReturnedInCorrectOrder) {
  auto q = NewQueue();
  ASSERT_TRUE(q->AddAfter("foo", absl::Seconds(1)).ok());
  ASSERT_TRUE(q->AddAfter("bar", absl::Milliseconds(200)).ok());
  EXPECT_EQ(q->Len(), 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Next(*q).first, "bar");
  EXPECT_EQ(Next(*q).first, "foo");
}

TEST_F(PriorityTest, CrWhenAddingMultipleItemsWithRatelimitTrueTheyDontAffectEachOther) {
  std::unique_ptr<ItemExponentialFailureRateLimiter> limiter =
      ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(5), absl::Seconds(1000)).value();
  ItemExponentialFailureRateLimiter* backoff = limiter.get();
  auto q = RateLimitingQueue::Create(
               {.clock = &clock_, .timer_slack = absl::ZeroDuration()}, std::move(limiter))
               .value();
  for (int i = 0; i < 7; ++i) backoff->When("bar");  // the next When("bar") is 640 ms
  ASSERT_TRUE(q->AddRateLimited("foo").ok());
  ASSERT_TRUE(q->AddRateLimited("bar").ok());
  EXPECT_EQ(q->Len(), 0u);
  clock_.Advance(absl::Milliseconds(5));
  EXPECT_EQ(Next(*q).first, "foo");
  EXPECT_EQ(q->Len(), 0u);
  clock_.Advance(absl::Milliseconds(635));
  EXPECT_EQ(Next(*q).first, "bar");
}

// ---- informerd's own rules ----

TEST_F(PriorityTest, AKeyAddedWhileProcessedWaitsAtTheHighestPriorityItWasAddedWith) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("foo", 5).ok());
  ASSERT_TRUE(q->Add("bar", 1).ok());
  EXPECT_THAT(Next(*q), Pair("foo", 5));
  // While foo is processed: added at -3, then at 2; it waits at 2 after Done, not at its old 5.
  ASSERT_TRUE(q->Add("foo", -3).ok());
  ASSERT_TRUE(q->Add("foo", 2).ok());
  ASSERT_TRUE(q->Done("foo").ok());
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(2, 1u), Pair(1, 1u)));
  EXPECT_THAT(Next(*q), Pair("foo", 2));
  EXPECT_THAT(Next(*q), Pair("bar", 1));
}

TEST_F(PriorityTest, ADelayedKeyKeepsTheHigherPriorityAndTheEarlierDeadline) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("other", 3).ok());
  ASSERT_TRUE(q->AddAfter("foo", absl::Seconds(5), 1).ok());
  ASSERT_TRUE(q->AddAfter("foo", absl::Seconds(2), 7).ok());
  ASSERT_TRUE(q->AddAfter("foo", absl::Seconds(9), -1).ok());
  EXPECT_EQ(q->Waiting(), 1u);
  clock_.Advance(absl::Seconds(2));
  EXPECT_THAT(Next(*q), Pair("foo", 7));
  EXPECT_THAT(Next(*q), Pair("other", 3));
}

TEST_F(PriorityTest, ARateLimitedAddKeepsItsPriority) {
  auto q = RateLimitingQueue::Create(
               {.clock = &clock_, .timer_slack = absl::ZeroDuration()},
               ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(10), absl::Seconds(1))
                   .value())
               .value();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->AddRateLimited("b", 4).ok());
  clock_.Advance(absl::Milliseconds(10));
  EXPECT_THAT(Next(*q), Pair("b", 4));
  EXPECT_THAT(Next(*q), Pair("a", 0));
}

TEST_F(PriorityTest, WithoutAgingALowPriorityWaitsForEveryHigherKey) {
  auto q = NewQueue(absl::InfiniteDuration());
  ASSERT_TRUE(q->Add("low", -100).ok());
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(q->Add("normal").ok());
  EXPECT_EQ(Next(*q).first, "normal");
  EXPECT_EQ(Next(*q).first, "low");
}

TEST_F(PriorityTest, AgingHandsOutAKeyThatWaitedTheBoundBeforeHigherPriorities) {
  auto q = NewQueue(absl::Minutes(1));
  ASSERT_TRUE(q->Add("low-1", -100).ok());  // t = 0
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(q->Add("low-2", -100).ok());  // t = 30 s
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(q->Add("high-1", 10).ok());  // t = 31 s
  ASSERT_TRUE(q->Add("normal-1").ok());
  // Nothing has waited a minute: strict priority.
  EXPECT_EQ(Next(*q).first, "high-1");
  clock_.Advance(absl::Seconds(29));  // t = 60 s
  ASSERT_TRUE(q->Add("high-2", 10).ok());
  // low-1 has waited its minute: it goes before high-2 (and normal-1, 29 s only).
  EXPECT_EQ(Next(*q).first, "low-1");
  EXPECT_EQ(Next(*q).first, "high-2");
  clock_.Advance(absl::Seconds(31));  // t = 91 s
  ASSERT_TRUE(q->Add("high-3", 10).ok());
  // low-2 (61 s) and normal-1 (60 s) are both overdue: the longest-waiting first.
  EXPECT_EQ(Next(*q).first, "low-2");
  EXPECT_EQ(Next(*q).first, "normal-1");
  EXPECT_EQ(Next(*q).first, "high-3");
}

TEST_F(PriorityTest, AgingOfEqualWaitsHandsOutTheHigherPriorityFirst) {
  auto q = NewQueue(absl::Minutes(1));
  ASSERT_TRUE(q->Add("low", -100).ok());
  ASSERT_TRUE(q->Add("normal").ok());
  ASSERT_TRUE(q->Add("middle", 5).ok());
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(q->Add("high", 10).ok());
  EXPECT_EQ(Next(*q).first, "middle");
  EXPECT_EQ(Next(*q).first, "normal");
  EXPECT_EQ(Next(*q).first, "low");
  EXPECT_EQ(Next(*q).first, "high");
}

TEST_F(PriorityTest, AgingIsPositive) {
  EXPECT_EQ(Queue::Create({.priority_aging = absl::ZeroDuration()}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PriorityTest, LenByPriorityListsTheWaitingKeysHighestFirst) {
  auto q = NewQueue();
  EXPECT_THAT(q->LenByPriority(), ElementsAre());
  ASSERT_TRUE(q->Add("a", -5).ok());
  ASSERT_TRUE(q->Add("b").ok());
  ASSERT_TRUE(q->Add("c", 3).ok());
  ASSERT_TRUE(q->Add("d", -5).ok());
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(3, 1u), Pair(0, 1u), Pair(-5, 2u)));
  EXPECT_EQ(Next(*q).first, "c");
  EXPECT_THAT(q->LenByPriority(), ElementsAre(Pair(0, 1u), Pair(-5, 2u)));
}

// Aging looks up the longest-waiting head in an index, whatever the number of priorities.
TEST_F(PriorityTest, AgingFindsTheOldestHeadAmongManyPriorities) {
  auto q = NewQueue(absl::Seconds(10));
  ASSERT_TRUE(q->Add("oldest", -1000).ok());
  clock_.Advance(absl::Seconds(1));
  for (int p = 1; p <= 200; ++p) ASSERT_TRUE(q->Add(absl::StrCat("k", p), p).ok());
  clock_.Advance(absl::Seconds(9));  // "oldest" has waited 10 s, the others 9 s
  EXPECT_THAT(Next(*q), Pair("oldest", -1000));
  EXPECT_THAT(Next(*q), Pair("k200", 200));
  clock_.Advance(absl::Seconds(1));  // now all 199 left are overdue: oldest first, of equal
  EXPECT_THAT(Next(*q), Pair("k199", 199));  // waits the higher priority
  EXPECT_EQ(q->LenAtPriority(1), 1u);
  EXPECT_EQ(q->LenAtPriority(-1000), 0u);
}

// A key that waited unstamped at the default priority (no other priority waited, no metrics)
// and is then raised waits from its raise, not from the start of time.
TEST_F(PriorityTest, AKeyRaisedFromTheDefaultPriorityWaitsFromItsRaise) {
  auto q = NewQueue(absl::Minutes(1));
  ASSERT_TRUE(q->Add("old").ok());
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(q->Add("top", 10).ok());
  ASSERT_TRUE(q->Add("old", 5).ok());
  EXPECT_THAT(Next(*q), Pair("top", 10));
  EXPECT_THAT(Next(*q), Pair("old", 5));
}

// client-go's isInInitialList for a queue: a lease is marked only while every add the key waited
// for was marked; any other add (a change, a retry, a delayed add) clears it until the key is
// handed out.
TEST_F(PriorityTest, ALeaseIsFromTheInitialListOnlyWhileEveryAddWas) {
  auto q = NewQueue();
  Lease lease;
  ASSERT_TRUE(q->Add("a", 0, /*initial_list=*/true).ok());
  ASSERT_TRUE(q->Add("b", 0, /*initial_list=*/true).ok());
  ASSERT_TRUE(q->Add("b", 0, /*initial_list=*/false).ok());
  ASSERT_TRUE(q->Add("c").ok());
  ASSERT_TRUE(q->Get(&lease));
  EXPECT_EQ(lease.key, "a");
  EXPECT_TRUE(lease.initial_list);
  // Added again while processed, from the initial list: it comes back marked.
  ASSERT_TRUE(q->Add("a", -1, /*initial_list=*/true).ok());
  ASSERT_TRUE(q->Done(lease).ok());
  ASSERT_TRUE(q->Get(&lease));
  EXPECT_EQ(lease.key, "b");
  EXPECT_FALSE(lease.initial_list);
  ASSERT_TRUE(q->Get(&lease));
  EXPECT_EQ(lease.key, "c");
  EXPECT_FALSE(lease.initial_list);
  ASSERT_TRUE(q->Get(&lease));
  EXPECT_EQ(lease.key, "a");
  EXPECT_TRUE(lease.initial_list);
  // A delayed add (a retry) is not initial.
  ASSERT_TRUE(q->Add("d", 0, /*initial_list=*/true).ok());
  ASSERT_TRUE(q->AddAfter("d", absl::Seconds(1)).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(q->Get(&lease));
  EXPECT_EQ(lease.key, "d");
  EXPECT_FALSE(lease.initial_list);
}

// However many priorities clients used, a bounded call stays bounded: the rest is summed into the
// last entry, at the highest of the priorities summed.
TEST_F(PriorityTest, LenByPrioritySumsThePrioritiesPastItsBoundIntoTheLastEntry) {
  auto q = NewQueue();
  for (int p = -3; p <= 3; ++p) ASSERT_TRUE(q->Add(absl::StrCat("k", p), p).ok());
  ASSERT_TRUE(q->Add("k-3b", -3).ok());
  EXPECT_THAT(q->LenByPriority(3), ElementsAre(Pair(3, 1u), Pair(2, 1u), Pair(1, 6u)));
  EXPECT_THAT(q->LenByPriority(5),
              ElementsAre(Pair(3, 1u), Pair(2, 1u), Pair(1, 1u), Pair(0, 1u), Pair(-1, 4u)));
  EXPECT_THAT(q->LenByPriority(1), ElementsAre(Pair(3, 8u)));
  EXPECT_EQ(q->LenByPriority(7).size(), 7u);
  EXPECT_THAT(q->LenByPriority(7).back(), Pair(-3, 2u));
  EXPECT_EQ(q->LenByPriority(8).size(), 7u);
}

}  // namespace
}  // namespace informerd::workqueue
