#include "base/clock.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace informerd {

// ---- Timer ----

Timer::~Timer() { queue_->Remove(id_); }
void Timer::ArmAt(absl::Time when) { queue_->Arm(id_, when); }
void Timer::Disarm() { queue_->Disarm(id_); }
bool Timer::armed() const { return queue_->Armed(id_); }

// ---- TimerQueue ----

TimerQueue::~TimerQueue() = default;

std::unique_ptr<Timer> TimerQueue::Create(absl::AnyInvocable<void()> callback) {
  MutexLock lock(&mu_);
  uint64_t id = next_id_++;
  entries_[id].callback = std::move(callback);
  return std::unique_ptr<Timer>(new Timer(this, id));
}

void TimerQueue::Arm(uint64_t id, absl::Time when) {
  MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  entry.deadline = when;
  entry.armed_seq = next_seq_++;
  heap_.push_back(HeapItem{when, entry.armed_seq, id});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
  // Re-armed, disarmed and removed timers leave stale items that only go when they reach the top,
  // which for a far deadline (a resync hours away, re-armed on every handler change) is never in
  // practice: rebuild once they outnumber the timers, so the heap is bounded by the timers alive.
  if (heap_.size() > 2 * entries_.size() + 16) {
    std::erase_if(heap_, [this](const HeapItem& item) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      auto e = entries_.find(item.id);
      return e == entries_.end() || e->second.armed_seq != item.seq;
    });
    std::make_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
  }
}

void TimerQueue::Disarm(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.armed_seq = 0;  // its heap item goes stale
  it->second.deadline = absl::InfiniteFuture();
}

bool TimerQueue::Armed(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.armed_seq != 0;
}

void TimerQueue::Remove(uint64_t id) {
  MutexLock lock(&mu_);
  if (running_id_ == id && running_thread_ != std::this_thread::get_id()) {
    mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return running_id_ != id; });
  }
  entries_.erase(id);
}

bool TimerQueue::PruneLocked() {
  while (!heap_.empty()) {
    const HeapItem& top = heap_.front();
    auto it = entries_.find(top.id);
    if (it != entries_.end() && it->second.armed_seq == top.seq) return true;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
    heap_.pop_back();
  }
  return false;
}

int TimerQueue::RunDue(absl::FunctionRef<absl::Time()> now) {
  int ran = 0;
  for (;;) {
    absl::AnyInvocable<void()> callback;
    uint64_t id = 0;
    {
      MutexLock lock(&mu_);
      if (!PruneLocked() || heap_.front().deadline > now()) return ran;
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
      id = heap_.back().id;
      heap_.pop_back();
      Entry& entry = entries_.at(id);
      entry.armed_seq = 0;
      entry.deadline = absl::InfiniteFuture();
      running_id_ = id;
      running_thread_ = std::this_thread::get_id();
      // Entries move when the map rehashes, so the callback is taken out for the call.
      callback = std::move(entry.callback);
    }
    callback();
    {
      MutexLock lock(&mu_);
      auto it = entries_.find(id);  // gone if the callback destroyed its own timer
      if (it != entries_.end()) it->second.callback = std::move(callback);
      running_id_ = 0;
    }
    ++ran;
  }
}

absl::Time TimerQueue::NextDeadline() {
  MutexLock lock(&mu_);
  return PruneLocked() ? heap_.front().deadline : absl::InfiniteFuture();
}

size_t TimerQueue::HeapSize() {
  MutexLock lock(&mu_);
  return heap_.size();
}

int TimerQueue::ArmedCount() {
  MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, entry] : entries_) n += entry.armed_seq != 0;
  return n;
}

void TimerQueue::WaitForEarlier(absl::Time than, absl::Time deadline,
                                const std::atomic<bool>& stop) {
  MutexLock lock(&mu_);
  const uint64_t pokes = poke_count_;
  mu_.AwaitWithDeadline(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (stop.load(std::memory_order_relaxed) || poke_count_ != pokes) return true;
        // Any live item earlier than `than`? Stale items only make us wake early, harmlessly.
        return !heap_.empty() && heap_.front().deadline < than;
      },
      deadline);
}

void TimerQueue::Poke() {
  MutexLock lock(&mu_);
  ++poke_count_;
}

// ---- RealClock ----

RealClock::RealClock() : thread_([this] { Loop(); }) {}

RealClock::~RealClock() {
  stop_.store(true);
  timers_.Poke();
  thread_.join();
}

std::unique_ptr<Timer> RealClock::CreateTimer(absl::AnyInvocable<void()> callback) {
  return timers_.Create(std::move(callback));
}

void RealClock::Loop() {
  while (!stop_.load()) {
    timers_.RunDue([] { return absl::Now(); });
    absl::Time next = timers_.NextDeadline();
    // Wake at the next deadline, when an earlier one is armed, or when stopping. Cap the wait so a
    // deadline armed in the past by a stale heap top is never missed for long.
    timers_.WaitForEarlier(next, std::min(next, absl::Now() + absl::Seconds(1)), stop_);
  }
}

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

// ---- FakeClock ----

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const { return absl::FromUnixNanos(now_ns_.load()); }

std::unique_ptr<Timer> FakeClock::CreateTimer(absl::AnyInvocable<void()> callback) {
  return timers_.Create(std::move(callback));
}

void FakeClock::Advance(absl::Duration d) {
  if (d > absl::ZeroDuration()) now_ns_.fetch_add(absl::ToInt64Nanoseconds(d));
  RunDue();
}

void FakeClock::SetTime(absl::Time t) {
  int64_t target = absl::ToUnixNanos(t);
  int64_t cur = now_ns_.load();
  while (cur < target && !now_ns_.compare_exchange_weak(cur, target)) {
  }
  RunDue();
}

void FakeClock::RunDue() {
  timers_.RunDue([this] { return Now(); });
}

int FakeClock::ArmedTimers() { return timers_.ArmedCount(); }
size_t FakeClock::TimerHeapSize() { return timers_.HeapSize(); }

absl::Time FakeClock::NextDeadline() { return timers_.NextDeadline(); }

}  // namespace informerd
