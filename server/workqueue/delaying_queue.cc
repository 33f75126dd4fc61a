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
  return AddAfterLocked(key, delay);
}

absl::Status DelayingQueue::AddAfterLocked(absl::string_view key, absl::Duration delay) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (ShuttingDownLocked()) {
    return absl::FailedPreconditionError("queue is shutting down; key not added");
  }
  if (metrics() != nullptr) metrics()->retries->Inc();
  if (delay <= absl::ZeroDuration()) return AddLocked(key);

  absl::Time ready_at = clock_->Now() + delay;
  auto [it, inserted] = waiting_.try_emplace(key);
  if (!inserted && it->second.ready_at <= ready_at) return absl::OkStatus();  // keep earlier
  uint64_t seq = next_seq_++;
  it->second = Deadline{ready_at, seq};
  heap_.push_back(HeapItem{ready_at, seq, std::string(key)});
  std::push_heap(heap_.begin(), heap_.end(), Later());
  if (ready_at < armed_for_) ArmLocked();
  return absl::OkStatus();
}

void DelayingQueue::ArmLocked() {
  // Drop stale items so the top is the real earliest deadline.
  while (!heap_.empty()) {
    const HeapItem& top = heap_.front();
    auto it = waiting_.find(top.key);
    if (it != waiting_.end() && it->second.seq == top.seq) break;
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    heap_.pop_back();
  }
  if (heap_.empty()) {
    armed_for_ = absl::InfiniteFuture();
    timer_->Disarm();
    return;
  }
  armed_for_ = heap_.front().ready_at;
  timer_->ArmAt(armed_for_);
}

void DelayingQueue::OnTimer() {
  MutexLock lock(&mu_);
  if (ShuttingDownLocked()) {
    heap_.clear();
    waiting_.clear();
    armed_for_ = absl::InfiniteFuture();
    return;
  }
  absl::Time now = clock_->Now();
  while (!heap_.empty() && heap_.front().ready_at <= now) {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    HeapItem item = std::move(heap_.back());
    heap_.pop_back();
    auto it = waiting_.find(item.key);
    if (it == waiting_.end() || it->second.seq != item.seq) continue;  // stale
    waiting_.erase(it);
    AddLocked(item.key).IgnoreError();  // cannot fail: non-empty key, not shutting down
  }
  ArmLocked();
}

size_t DelayingQueue::Waiting() const {
  MutexLock lock(&mu_);
  return waiting_.size();
}

}  // namespace informerd::workqueue
