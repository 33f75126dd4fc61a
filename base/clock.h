// Clock: the injected source of time and the one timer facility shared by every component.
//
// Components never read the system clock or sleep directly: they take a `Clock*` and ask it for
// `Now()` and for timers. Production code uses `Clock::Real()` (one timer thread per process);
// tests use `FakeClock` and move time forward explicitly, so no test sleeps to wait.
//
// A Timer is a callback plus at most one pending deadline. Arming an armed timer moves its
// deadline; callbacks run without any clock lock held, on the clock's timer thread (real) or
// inside `FakeClock::Advance` (fake), one at a time per clock, in deadline order.
//
//   std::unique_ptr<Timer> timer = clock->CreateTimer([this] { OnTimer(); });
//   timer->ArmAt(clock->Now() + absl::Seconds(1));
//
// Thread safety: every method may be called from any thread, including from inside a timer
// callback (a callback may re-arm or disarm its own timer). Destroying a Timer waits until its
// callback is no longer running (unless the destructor runs inside that very callback), so a
// callback may safely use the object that owns the timer.
#ifndef INFORMERD_BASE_CLOCK_H_
#define INFORMERD_BASE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "base/mutex.h"

namespace informerd {

class TimerQueue;

// A re-armable one-shot timer created by a Clock. Not copyable; owned by the component using it.
class Timer {
 public:
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Schedules the callback at `when` (now or in the past: as soon as possible), replacing any
  // pending deadline.
  void ArmAt(absl::Time when);
  // Drops the pending deadline, if any. A callback already running is not interrupted.
  void Disarm();
  // Whether a deadline is pending.
  bool armed() const;

 private:
  friend class TimerQueue;
  Timer(TimerQueue* queue, uint64_t id) : queue_(queue), id_(id) {}
  TimerQueue* const queue_;
  const uint64_t id_;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Creates a disarmed timer that runs `callback` at each deadline it is armed for.
  // REQUIRES: the timer is destroyed before this clock.
  virtual std::unique_ptr<Timer> CreateTimer(absl::AnyInvocable<void()> callback) = 0;

  // The process-wide real clock. Never destroyed.
  static Clock* Real();
};

// Shared bookkeeping of timers: which are armed for when, and which one is running.
// Used by RealClock and FakeClock; not part of the public surface.
class TimerQueue {
 public:
  TimerQueue() = default;
  ~TimerQueue();

  std::unique_ptr<Timer> Create(absl::AnyInvocable<void()> callback);
  void Arm(uint64_t id, absl::Time when);
  void Disarm(uint64_t id);
  bool Armed(uint64_t id);
  // Forgets `id`, waiting for its callback to return if it is running on another thread.
  void Remove(uint64_t id);

  // Runs, one at a time, every callback due at or before `now()`; returns how many ran.
  // `now` is re-read after each callback, so a timer re-armed for "now" runs in the same call.
  int RunDue(absl::FunctionRef<absl::Time()> now);
  // The earliest pending deadline, or InfiniteFuture.
  absl::Time NextDeadline();
  // Number of armed timers.
  int ArmedCount();
  // Items in the deadline heap, stale ones included (bounded by about twice the timers alive).
  size_t HeapSize();
  // Blocks until a deadline earlier than `than` is armed, `stop` is set, or `deadline` passes.
  void WaitForEarlier(absl::Time than, absl::Time deadline, const std::atomic<bool>& stop);
  // Wakes WaitForEarlier (used to stop the timer thread).
  void Poke();

 private:
  struct Entry {
    absl::AnyInvocable<void()> callback;
    absl::Time deadline = absl::InfiniteFuture();
    uint64_t armed_seq = 0;  // 0: disarmed; else matches the heap item that is live
  };
  struct HeapItem {
    absl::Time deadline;
    uint64_t seq;  // FIFO among equal deadlines
    uint64_t id;
    bool operator>(const HeapItem& o) const {
      return deadline != o.deadline ? deadline > o.deadline : seq > o.seq;
    }
  };
  // Pops stale heap items; returns whether a live one is on top.
  bool PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t poke_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Min-heap by (deadline, seq). An item is live iff entries_[id].armed_seq == seq.
  std::vector<HeapItem> heap_ ABSL_GUARDED_BY(mu_);
  uint64_t running_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread::id running_thread_ ABSL_GUARDED_BY(mu_);
};

// Wall-clock time and a single background thread that runs timer callbacks.
class RealClock final : public Clock {
 public:
  RealClock();
  ~RealClock() override;  // Stops the timer thread. REQUIRES: all its timers are destroyed.

  // Clock:
  absl::Time Now() const override { return absl::Now(); }
  std::unique_ptr<Timer> CreateTimer(absl::AnyInvocable<void()> callback) override;

 private:
  void Loop();
  TimerQueue timers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Time that only moves when told to. Timer callbacks run inside Advance/SetTime, on the caller's
// thread, in deadline order, each seeing Now() equal to at least its deadline.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 50));

  // Clock:
  absl::Time Now() const override;
  std::unique_ptr<Timer> CreateTimer(absl::AnyInvocable<void()> callback) override;

  // Moves time forward by `d` (>= 0) and runs every timer that became due.
  void Advance(absl::Duration d);
  // Moves time to `t` (never backwards) and runs every timer that became due.
  void SetTime(absl::Time t);
  // Runs timers already due without moving time (e.g. ones armed for "now").
  void RunDue();
  // Number of armed timers: lets a test wait until a component has scheduled its wake-up.
  int ArmedTimers();
  // TimerQueue::HeapSize of this clock's timers.
  size_t TimerHeapSize();
  // The earliest pending deadline, or InfiniteFuture.
  absl::Time NextDeadline();

 private:
  std::atomic<int64_t> now_ns_;
  TimerQueue timers_;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_CLOCK_H_
