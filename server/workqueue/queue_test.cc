#include "server/workqueue/queue.h"

#include <atomic>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/eventually.h"
#include "base/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/workqueue/prometheus_metrics.h"

namespace informerd::workqueue {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;

std::unique_ptr<Queue> NewQueue() { return Queue::Create({}).value(); }

// Waits (by yielding, never sleeping) until `pred` holds.
template <typename Pred>
void SpinUntil(Pred pred) {
  while (!pred()) std::this_thread::yield();
}

TEST(QueueTest, GetHandsOutKeysInFifoOrder) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("b").ok());
  ASSERT_TRUE(q->Add("c").ok());
  EXPECT_EQ(q->Len(), 3u);
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
  EXPECT_THAT(q->Get(), Optional(std::string("b")));
  EXPECT_THAT(q->Get(), Optional(std::string("c")));
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Processing(), 3u);
}

TEST(QueueTest, AddingAWaitingKeyIsDeduplicated) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("b").ok());
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(q->Len(), 2u);
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
  EXPECT_THAT(q->Get(), Optional(std::string("b")));
  EXPECT_EQ(q->Len(), 0u);
}

TEST(QueueTest, AddWhileProcessingIsRedeliveredOnlyAfterDone) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(q->Len(), 0u) << "a held key must not be handed to a second worker";
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_EQ(q->Len(), 1u) << "Done re-queues a key added while it was processing, once";
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Processing(), 0u);
}

TEST(QueueTest, ReinsertedKeyGoesToTheBackOfTheQueue) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  ASSERT_TRUE(q->Add("b").ok());
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_THAT(q->Get(), Optional(std::string("b")));
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
}

TEST(QueueTest, DifferentKeysAreProcessedInParallelAndFinishInAnyOrder) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("b").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  ASSERT_THAT(q->Get(), Optional(std::string("b")));
  EXPECT_EQ(q->Processing(), 2u);
  ASSERT_TRUE(q->Done("b").ok());
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_EQ(q->Processing(), 0u);
}

TEST(QueueTest, GetBatchHandsOutUpToMaxKeysInOrder) {
  auto q = NewQueue();
  for (const char* k : {"a", "b", "c", "d", "e"}) ASSERT_TRUE(q->Add(k).ok());
  EXPECT_THAT(q->GetBatch(2), ElementsAre("a", "b"));
  EXPECT_THAT(q->GetBatch(10), ElementsAre("c", "d", "e"));
  EXPECT_EQ(q->Processing(), 5u);
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(q->Len(), 0u) << "batched keys obey the processing rule too";
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_THAT(q->GetBatch(0), ElementsAre("a")) << "max 0 is treated as 1";
}

TEST(QueueTest, TryGetBatchNeverBlocks) {
  auto q = NewQueue();
  std::vector<std::string> out;
  EXPECT_EQ(q->TryGetBatch(5, &out), 0u);
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(q->TryGetBatch(5, &out), 1u);
  EXPECT_THAT(out, ElementsAre("a"));
}

TEST(QueueLeaseTest, EveryHandOutCarriesAHigherFencingToken) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("b").ok());
  Lease a1, b1, a2;
  ASSERT_TRUE(q->Get(&a1));
  ASSERT_TRUE(q->Get(&b1));
  EXPECT_EQ(a1.key, "a");
  EXPECT_EQ(b1.key, "b");
  EXPECT_GT(b1.token, a1.token);
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Done(a1).ok());
  ASSERT_TRUE(q->Get(&a2));
  EXPECT_EQ(a2.key, "a");
  EXPECT_GT(a2.token, b1.token);
  ASSERT_TRUE(q->Done(b1).ok());
  ASSERT_TRUE(q->Done(a2).ok());
  EXPECT_EQ(q->Processing(), 0u);
}

TEST(QueueLeaseTest, AStaleLeaseCannotEndTheCurrentHandOut) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  Lease first;
  ASSERT_TRUE(q->Get(&first));
  ASSERT_TRUE(q->Done(first).ok());
  EXPECT_EQ(q->Done(first).code(), absl::StatusCode::kFailedPrecondition) << "double Done";
  ASSERT_TRUE(q->Add("a").ok());
  Lease second;
  ASSERT_TRUE(q->Get(&second));
  EXPECT_EQ(second.slot, first.slot) << "the slot is recycled, the token is not";
  EXPECT_EQ(q->Done(first).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q->Processing(), 1u) << "the stale Done must leave the current hand-out alone";
  ASSERT_TRUE(q->Done(second).ok());
}

TEST(QueueLeaseTest, ForgedLeasesAreRefused) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  Lease real;
  ASSERT_TRUE(q->Get(&real));
  Lease out_of_range = real;
  out_of_range.slot = 1000000;
  EXPECT_EQ(q->Done(out_of_range).code(), absl::StatusCode::kFailedPrecondition);
  Lease wrong_token = real;
  wrong_token.token += 1;
  EXPECT_EQ(q->Done(wrong_token).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q->Processing(), 1u);
  EXPECT_TRUE(q->Done(real).ok());
}

TEST(QueueLeaseTest, LeaseAndKeyDoneAreInterchangeable) {
  auto q = NewQueue();
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(q->Add(k).ok());
  std::vector<Lease> leases;
  ASSERT_EQ(q->GetBatch(3, &leases), 3u);
  ASSERT_TRUE(q->Add("b").ok());  // added while processing
  ASSERT_TRUE(q->Done("a").ok());
  ASSERT_TRUE(q->Done(leases[1]).ok());
  EXPECT_EQ(q->Done(leases[0]).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q->Len(), 1u) << "b was re-queued by its lease's Done";
  ASSERT_TRUE(q->Done(leases[2]).ok());
  std::vector<Lease> more;
  EXPECT_EQ(q->TryGetBatch(10, &more), 1u);
  EXPECT_EQ(more[0].key, "b");
}

TEST(QueueLeaseTest, DoneAllEndsTheCurrentHandOutsAndSkipsStaleOnes) {
  auto q = NewQueue();
  for (const char* k : {"a", "b", "c", "d"}) ASSERT_TRUE(q->Add(k).ok());
  std::vector<Lease> leases;
  ASSERT_EQ(q->GetBatch(4, &leases), 4u);
  ASSERT_TRUE(q->Add("b").ok());  // added again while processing: back in the FIFO after Done
  ASSERT_TRUE(q->Done(leases[3]).ok());  // "d" already ended: its hand-out is stale below
  std::vector<HandOut> ends;
  for (const Lease& l : leases) ends.push_back({.slot = l.slot, .token = l.token});
  ends.push_back({.slot = leases[0].slot, .token = leases[0].token + 1000});  // forged token
  ends.push_back({.slot = 1u << 30, .token = leases[1].token});                // out of range
  EXPECT_EQ(q->DoneAll(ends), 3u);
  EXPECT_EQ(q->Processing(), 0u);
  EXPECT_EQ(q->Len(), 1u);
  std::vector<Lease> again;
  ASSERT_EQ(q->TryGetBatch(10, &again), 1u);
  EXPECT_EQ(again[0].key, "b");
  EXPECT_GT(again[0].token, leases[3].token);
  // The freed keys are gone: adding them again starts them afresh.
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(q->Len(), 1u);
  EXPECT_EQ(q->DoneAll(ends), 0u) << "ending the same hand-outs twice";
}

TEST(QueueTest, EmptyKeyIsRefused) {
  auto q = NewQueue();
  EXPECT_EQ(q->Add("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q->Len(), 0u);
}

TEST(QueueTest, DoneOfAKeyNotBeingProcessedChangesNothing) {
  auto q = NewQueue();
  EXPECT_EQ(q->Done("never-added").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(q->Add("waiting").ok());
  EXPECT_EQ(q->Done("waiting").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q->Len(), 1u) << "a waiting key must not be duplicated by a stray Done";
  ASSERT_THAT(q->Get(), Optional(std::string("waiting")));
  ASSERT_TRUE(q->Done("waiting").ok());
  EXPECT_EQ(q->Done("waiting").code(), absl::StatusCode::kFailedPrecondition) << "double Done";
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Processing(), 0u);
}

TEST(QueueTest, AddAfterShutDownIsRefused) {
  auto q = NewQueue();
  q->ShutDown();
  EXPECT_TRUE(q->ShuttingDown());
  EXPECT_EQ(q->Add("a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Get(), std::nullopt);
  EXPECT_THAT(q->GetBatch(4), IsEmpty());
}

TEST(QueueTest, ShutDownWakesBlockedGettersAtOnce) {
  auto q = NewQueue();
  std::vector<std::thread> getters;
  std::atomic<int> saw_shutdown{0};
  for (int i = 0; i < 3; ++i) {
    getters.emplace_back([&] {
      if (!q->Get().has_value()) ++saw_shutdown;
    });
  }
  // Every getter is parked in Get (not still spinning, nor yet to start) ...
  ASSERT_TRUE(Eventually([&] { return q->ParkedGetters() == 3; }));
  const absl::Time shut_down = absl::Now();
  q->ShutDown();
  // ... and that one ShutDown returns all of them, with no Add or timer after it: a wake-up
  // takes microseconds, and 2 s is far more than a loaded 2-core machine under a sanitizer
  // needs (a lost wake-up would leave a getter parked for ever).
  EXPECT_TRUE(Eventually([&] { return saw_shutdown.load() == 3; }, absl::Seconds(2)))
      << "woken: " << saw_shutdown.load();
  EXPECT_LT(absl::Now() - shut_down, absl::Seconds(2));
  if (saw_shutdown.load() != 3) std::abort();  // a getter still parked: joining would hang
  for (auto& t : getters) t.join();
  EXPECT_EQ(q->ParkedGetters(), 0);
}

TEST(QueueTest, KeysWaitingAtShutDownAreStillHandedOut) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("b").ok());
  q->ShutDown();
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
  EXPECT_THAT(q->Get(), Optional(std::string("b")));
  EXPECT_EQ(q->Get(), std::nullopt);
}

TEST(QueueTest, KeyAddedWhileProcessingIsStillRedeliveredAfterShutDown) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  ASSERT_TRUE(q->Add("a").ok());
  q->ShutDown();
  ASSERT_TRUE(q->Done("a").ok());
  EXPECT_THAT(q->Get(), Optional(std::string("a"))) << "the pending change must not be lost";
}

TEST(QueueTest, ShutDownWithDrainWaitsForKeysInFlight) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    q->ShutDownWithDrain();
    drained = true;
  });
  SpinUntil([&] { return q->ShuttingDown(); });
  EXPECT_FALSE(drained.load()) << "drain returned while a key was still processing";
  EXPECT_EQ(q->Add("b").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(q->Done("a").ok());
  drainer.join();
  EXPECT_TRUE(drained.load());
  EXPECT_EQ(q->Processing(), 0u);
}

TEST(QueueTest, ForcedShutDownCutsADrainShort) {
  auto q = NewQueue();
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  std::thread drainer([&] { q->ShutDownWithDrain(); });
  SpinUntil([&] { return q->ShuttingDown(); });
  q->ShutDown();
  drainer.join();  // returns although "a" is still processing
  EXPECT_EQ(q->Processing(), 1u);
  EXPECT_TRUE(q->Done("a").ok());
}

TEST(QueueTest, ShutDownWithDrainOnAnIdleQueueReturnsAtOnce) {
  auto q = NewQueue();
  q->ShutDownWithDrain();
  EXPECT_TRUE(q->ShuttingDown());
}

// client-go's TestBasic: many producers and consumers, under both shutdown modes.
class QueueShutdownModeTest : public ::testing::TestWithParam<bool> {};

TEST_P(QueueShutdownModeTest, EveryAddedKeyIsDeliveredAndTheQueueEndsEmpty) {
  const bool drain = GetParam();
  auto q = NewQueue();
  constexpr int kProducers = 4;
  constexpr int kConsumers = 4;
  constexpr int kKeysPerProducer = 2000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kKeysPerProducer; ++i) {
        ASSERT_TRUE(q->Add("p" + std::to_string(p) + "/" + std::to_string(i)).ok());
      }
    });
  }
  Mutex mu;
  std::set<std::string> delivered;
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&] {
      while (auto key = q->Get()) {
        {
          MutexLock lock(&mu);
          delivered.insert(*key);
        }
        ASSERT_TRUE(q->Done(*key).ok());
      }
    });
  }
  for (auto& t : producers) t.join();
  if (drain) {
    q->ShutDownWithDrain();
  } else {
    q->ShutDown();
  }
  EXPECT_EQ(q->Add("late").code(), absl::StatusCode::kFailedPrecondition);
  for (auto& t : consumers) t.join();
  std::set<std::string> expected;
  for (int p = 0; p < kProducers; ++p) {
    for (int i = 0; i < kKeysPerProducer; ++i) {
      expected.insert("p" + std::to_string(p) + "/" + std::to_string(i));
    }
  }
  MutexLock lock(&mu);
  EXPECT_EQ(delivered.size(), expected.size());
  EXPECT_TRUE(delivered == expected) << "some added key was never delivered";
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Processing(), 0u);
}

INSTANTIATE_TEST_SUITE_P(BothModes, QueueShutdownModeTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Drain" : "Immediate"; });

TEST(QueueMetricsTest, RecordsClientGoMetricsOnTheInjectedClock) {
  FakeClock clock;
  MetricsRegistry registry;
  PrometheusMetricsProvider provider(&registry);
  auto q = Queue::Create({.name = "pods", .clock = &clock, .metrics_provider = &provider}).value();
  const Labels labels = {{"name", "pods"}};
  ASSERT_TRUE(q->Add("a").ok());
  ASSERT_TRUE(q->Add("a").ok());  // deduplicated: not an add
  ASSERT_TRUE(q->Add("b").ok());
  EXPECT_EQ(registry.GetCounter("workqueue_adds_total", "", labels)->Value(), 2);
  EXPECT_EQ(registry.GetGauge("workqueue_depth", "", labels)->Value(), 2);

  clock.Advance(absl::Milliseconds(100));  // not yet a gauge refresh (500 ms)
  ASSERT_THAT(q->Get(), Optional(std::string("a")));
  Histogram* latency = registry.GetHistogram("workqueue_queue_duration_seconds", "", labels, {});
  EXPECT_EQ(latency->Count(), 1u);
  EXPECT_DOUBLE_EQ(latency->Sum(), 0.1);
  EXPECT_EQ(registry.GetGauge("workqueue_depth", "", labels)->Value(), 1);

  clock.Advance(absl::Milliseconds(400));  // 500 ms: the in-flight gauges refresh
  EXPECT_DOUBLE_EQ(registry.GetGauge("workqueue_unfinished_work_seconds", "", labels)->Value(),
                   0.4);
  EXPECT_DOUBLE_EQ(
      registry.GetGauge("workqueue_longest_running_processor_seconds", "", labels)->Value(), 0.4);

  clock.Advance(absl::Milliseconds(600));
  ASSERT_TRUE(q->Done("a").ok());
  Histogram* work = registry.GetHistogram("workqueue_work_duration_seconds", "", labels, {});
  EXPECT_EQ(work->Count(), 1u);
  EXPECT_DOUBLE_EQ(work->Sum(), 1.0);
  clock.Advance(absl::Milliseconds(500));
  EXPECT_EQ(registry.GetGauge("workqueue_unfinished_work_seconds", "", labels)->Value(), 0);

  std::string text = registry.Render();
  for (const char* name :
       {"workqueue_depth", "workqueue_adds_total", "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds", "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds", "workqueue_retries_total"}) {
    EXPECT_THAT(text, HasSubstr(std::string("# TYPE ") + name)) << name;
  }
}

TEST(QueueMetricsTest, UnnamedQueueRecordsNothing) {
  FakeClock clock;
  MetricsRegistry registry;
  PrometheusMetricsProvider provider(&registry);
  auto q = Queue::Create({.clock = &clock, .metrics_provider = &provider}).value();
  ASSERT_TRUE(q->Add("a").ok());
  EXPECT_EQ(registry.Render(), "");
  EXPECT_EQ(clock.ArmedTimers(), 0);
}

TEST(QueueTest, InvalidOptionsAreRejected) {
  auto q = Queue::Create({.unfinished_work_update_period = absl::ZeroDuration()});
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace informerd::workqueue
