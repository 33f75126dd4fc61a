#include "server/workqueue/delaying_queue.h"

#include <algorithm>
#include <utility>

namespace informerd::workqueue {

absl::StatusOr<std::unique_ptr<DelayingQueue>> DelayingQueue::Create(QueueOptions options) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  return std::unique_ptr<DelayingQueue>(new DelayingQueue(std::move(options)));
}

DelayingQueue::DelayingQueue(QueueOptions options)
    : Queue(std::move(options)), timer_(clock_->CreateTimer([this] { OnTimer(); })) {}

DelayingQueue::~DelayingQueue() {
  ShutDown();
  timer_.reset();  // waits for a running OnTimer
}

absl::Status DelayingQueue::AddAfter(absl::string_view key, absl::Duration delay) {
  MutexLock lock(&mu_);
  return AddAfterLocked(key, delay, kDefaultPriority);
}

absl::Status DelayingQueue::AddAfter(absl::string_view key, absl::Duration delay,
                                     int32_t priority) {
  MutexLock lock(&mu_);
  return AddAfterLocked(key, delay, priority);
}

absl::Status DelayingQueue::AddAfterLocked(absl::string_view key, absl::Duration delay,
                                           int32_t priority) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (ShuttingDownLocked()) {
    return absl::FailedPreconditionError("queue is shutting down; key not added");
  }
  if (metrics() != nullptr) metrics()->retries->Inc();
  if (delay <= absl::ZeroDuration()) return AddLocked(key, priority);

  int64_t ready_ns = absl::ToUnixNanos(clock_->Now() + delay);
  SlotId id = SlotForLocked(key);
  Slot& slot = SlotAt(id);
  if (slot.waiting_seq != 0) {
    slot.delayed_priority = std::max(slot.delayed_priority, priority);
    if (slot.waiting_until_ns <= ready_ns) return absl::OkStatus();  // keep the earlier one
  } else {
    ++waiting_count_;
    slot.delayed_priority = priority;
  }
  slot.waiting_seq = next_seq_++;
  slot.waiting_until_ns = ready_ns;
  heap_.push_back(HeapItem{ready_ns, slot.waiting_seq, id});
  std::push_heap(heap_.begin(), heap_.end(), Later());
  if (ready_ns < armed_for_ns_) ArmLocked();
  return absl::OkStatus();
}

void DelayingQueue::ArmLocked() {
  while (!heap_.empty() && !LiveLocked(heap_.front())) {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    heap_.pop_back();
  }
  if (heap_.empty()) {
    armed_for_ns_ = INT64_MAX;
    timer_->Disarm();
    return;
  }
  armed_for_ns_ = heap_.front().ready_ns;
  timer_->ArmAt(absl::FromUnixNanos(armed_for_ns_));
}

void DelayingQueue::OnTimer() {
  MutexLock lock(&mu_);
  if (ShuttingDownLocked()) {
    // Keys still waiting for a deadline are dropped, as client-go's waiting loop does.
    for (const HeapItem& item : heap_) {
      if (!LiveLocked(item)) continue;
      SlotAt(item.slot).waiting_seq = 0;
      ReleaseIfIdleLocked(item.slot);
    }
    heap_.clear();
    waiting_count_ = 0;
    armed_for_ns_ = INT64_MAX;
    return;
  }
  int64_t now_ns = absl::ToUnixNanos(clock_->Now());
  while (!heap_.empty() && heap_.front().ready_ns <= now_ns) {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    HeapItem item = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) __builtin_prefetch(&SlotAt(heap_.front().slot), 1);
    if (!LiveLocked(item)) continue;
    Slot& slot = SlotAt(item.slot);
    slot.waiting_seq = 0;
    --waiting_count_;
    AddSlotLocked(item.slot, slot.delayed_priority);
  }
  ArmLocked();
  // Coalesce: the next run comes no sooner than timer_slack from now.
  int64_t earliest_ns = now_ns + absl::ToInt64Nanoseconds(timer_slack_);
  if (armed_for_ns_ != INT64_MAX && armed_for_ns_ < earliest_ns) {
    armed_for_ns_ = earliest_ns;
    timer_->ArmAt(absl::FromUnixNanos(earliest_ns));
  }
}

size_t DelayingQueue::Waiting() const {
  MutexLock lock(&mu_);
  return waiting_count_;
}

}  // namespace informerd::workqueue
