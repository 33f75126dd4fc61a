#include "base/executor.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

// Returns once every task posted to `executor` before the call has started (and, with one
// thread, finished).
void Drain(Executor& executor) {
  absl::Notification drained;
  executor.Post([&] { drained.Notify(); });
  drained.WaitForNotification();
}

TEST(ExecutorTest, RunsEveryTaskOnItsOwnThreads) {
  std::atomic<int> ran{0};
  std::atomic<int> foreign{0};
  {
    Executor executor({.threads = 3, .name = "test"});
    EXPECT_EQ(executor.threads(), 3);
    EXPECT_FALSE(executor.OnExecutorThread());
    for (int i = 0; i < 1000; ++i) {
      executor.Post([&] {
        if (!executor.OnExecutorThread()) foreign.fetch_add(1);
        ran.fetch_add(1);
      });
    }
  }  // the destructor runs what is queued
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(foreign.load(), 0);
}

TEST(ExecutorTest, TasksRunInParallelUpToTheThreadCount) {
  Executor executor({.threads = 2, .name = "test"});
  absl::Notification release;
  std::atomic<int> running{0};
  for (int i = 0; i < 2; ++i) {
    executor.Post([&] {
      running.fetch_add(1);
      release.WaitForNotification();
    });
  }
  // Both block at once: two threads, neither waits for the other.
  EXPECT_TRUE(Eventually([&] { return running.load() == 2; }));
  release.Notify();
}

TEST(SerialTaskTest, RunsNeverTwiceAtOnceAndNeverMissesASchedule) {
  Executor executor({.threads = 4, .name = "test"});
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> produced{0};
  std::atomic<int> consumed{0};
  SerialTask task(&executor, [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    // Takes whatever was produced so far, as a FIFO's consumer does.
    consumed.store(produced.load());
    inside.fetch_sub(1);
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        produced.fetch_add(1);
        task.Schedule();
      }
    });
  }
  for (std::thread& t : producers) t.join();
  // The last item produced is consumed by a run that started after its Schedule.
  EXPECT_TRUE(Eventually([&] { return consumed.load() == 20000; }));
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(SerialTaskTest, SchedulesCoalesceWhileQueued) {
  Executor executor({.threads = 1, .name = "test"});
  absl::Notification started;
  absl::Notification release;
  executor.Post([&] {  // holds the only thread
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  std::atomic<int> runs{0};
  SerialTask task(&executor, [&] { runs.fetch_add(1); });
  for (int i = 0; i < 100; ++i) task.Schedule();
  EXPECT_EQ(executor.queued(), 1u);
  release.Notify();
  EXPECT_TRUE(Eventually([&] { return runs.load() == 1; }));
  task.Schedule();
  EXPECT_TRUE(Eventually([&] { return runs.load() == 2; }));
}

TEST(SerialTaskTest, StopWaitsForTheRunInProgressAndNoRunFollows) {
  Executor executor({.threads = 2, .name = "test"});
  absl::Notification entered;
  absl::Notification release;
  std::atomic<bool> finished{false};
  std::atomic<int> runs{0};
  auto task = std::make_unique<SerialTask>(&executor, [&] {
    if (runs.fetch_add(1) == 0) {
      entered.Notify();
      release.WaitForNotification();
      finished.store(true);
    }
  });
  task->Schedule();
  entered.WaitForNotification();
  task->Schedule();  // would run again after this run
  std::thread stopper([&] {
    task->Stop();
    // Stop returned: the run it waited for is over.
    EXPECT_TRUE(finished.load());
  });
  absl::SleepFor(absl::Milliseconds(20));
  release.Notify();
  stopper.join();
  task.reset();
  Drain(executor);  // nothing more ran
  EXPECT_EQ(runs.load(), 1);
}

TEST(SerialTaskTest, StopFromWithinTheRunReturnsAndEndsIt) {
  Executor executor({.threads = 1, .name = "test"});
  std::atomic<int> runs{0};
  SerialTask* self = nullptr;
  SerialTask task(&executor, [&] {
    runs.fetch_add(1);
    self->Schedule();
    self->Stop();  // does not wait for itself
  });
  self = &task;
  task.Schedule();
  EXPECT_TRUE(Eventually([&] { return runs.load() == 1; }));
  Drain(executor);
  task.Schedule();  // ignored: stopped
  Drain(executor);
  EXPECT_EQ(runs.load(), 1);
}

TEST(SerialTaskTest, ManyTasksShareTheThreads) {
  Executor executor({.threads = 2, .name = "test"});
  constexpr int kTasks = 1000;
  std::atomic<int> runs{0};
  std::vector<std::unique_ptr<SerialTask>> tasks;
  for (int i = 0; i < kTasks; ++i) {
    tasks.push_back(std::make_unique<SerialTask>(&executor, [&] { runs.fetch_add(1); }));
  }
  for (auto& t : tasks) t->Schedule();
  EXPECT_TRUE(Eventually([&] { return runs.load() == kTasks; }));
  EXPECT_EQ(executor.threads(), 2);
}

}  // namespace
}  // namespace informerd
