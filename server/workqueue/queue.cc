#include "server/workqueue/queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::workqueue {

absl::StatusOr<std::unique_ptr<Queue>> Queue::Create(QueueOptions options) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  return std::unique_ptr<Queue>(new Queue(std::move(options)));
}

absl::Status Queue::Validate(const QueueOptions& options) {
  if (options.unfinished_work_update_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("unfinished_work_update_period must be positive");
  }
  return absl::OkStatus();
}

Queue::Queue(QueueOptions options)
    : clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      name_(std::move(options.name)),
      metrics_(options.metrics_provider != nullptr && !name_.empty()
                   ? QueueMetrics::Create(*options.metrics_provider, name_)
                   : nullptr),
      unfinished_work_update_period_(options.unfinished_work_update_period) {
  if (metrics_ != nullptr) {
    unfinished_work_timer_ = clock_->CreateTimer([this] { UpdateUnfinishedWork(); });
    unfinished_work_timer_->ArmAt(clock_->Now() + unfinished_work_update_period_);
  }
}

Queue::~Queue() {
  ShutDown();
  unfinished_work_timer_.reset();  // waits for a running update
}

absl::Status Queue::Add(absl::string_view key) {
  MutexLock lock(&mu_);
  return AddLocked(key);
}

absl::Status Queue::AddLocked(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (shutting_down_) {
    return absl::FailedPreconditionError("queue is shutting down; key not added");
  }
  auto [it, inserted] = items_.try_emplace(key);
  Entry& entry = it->second;
  if (entry.dirty) return absl::OkStatus();  // already waiting: dedup
  entry.dirty = true;
  if (metrics_ != nullptr) {
    metrics_->adds->Inc();
    entry.added_at = clock_->Now();
  }
  if (entry.processing) return absl::OkStatus();  // Done will re-queue it
  if (metrics_ != nullptr) metrics_->depth->Inc();
  queue_.push_back(&*it);
  return absl::OkStatus();
}

std::string Queue::PopLocked() {
  Item* item = queue_.front();
  queue_.pop_front();
  Entry& entry = item->second;
  entry.dirty = false;
  entry.processing = true;
  ++processing_count_;
  if (metrics_ != nullptr) {
    absl::Time now = clock_->Now();
    metrics_->depth->Dec();
    metrics_->queue_latency->Observe(absl::ToDoubleSeconds(now - entry.added_at));
    entry.started_at = now;
    in_flight_.insert(item);
  }
  return item->first;
}

std::optional<std::string> Queue::Get() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !queue_.empty() || shutting_down_;
  });
  if (queue_.empty()) return std::nullopt;
  return PopLocked();
}

std::vector<std::string> Queue::GetBatch(size_t max) {
  std::vector<std::string> keys;
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !queue_.empty() || shutting_down_;
  });
  size_t n = std::min(std::max<size_t>(max, 1), queue_.size());
  keys.reserve(n);
  for (size_t i = 0; i < n; ++i) keys.push_back(PopLocked());
  return keys;
}

size_t Queue::TryGetBatch(size_t max, std::vector<std::string>* out) {
  MutexLock lock(&mu_);
  size_t n = std::min(max, queue_.size());
  for (size_t i = 0; i < n; ++i) out->push_back(PopLocked());
  return n;
}

absl::Status Queue::Done(absl::string_view key) {
  MutexLock lock(&mu_);
  auto it = items_.find(key);
  if (it == items_.end() || !it->second.processing) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", key, "\" is not being processed; Done ignored"));
  }
  Entry& entry = it->second;
  entry.processing = false;
  --processing_count_;
  if (metrics_ != nullptr) {
    metrics_->work_duration->Observe(absl::ToDoubleSeconds(clock_->Now() - entry.started_at));
    in_flight_.erase(&*it);
  }
  if (entry.dirty) {
    if (metrics_ != nullptr) metrics_->depth->Inc();
    queue_.push_back(&*it);
  } else {
    items_.erase(it);
  }
  return absl::OkStatus();
}

size_t Queue::Len() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

size_t Queue::Processing() const {
  MutexLock lock(&mu_);
  return processing_count_;
}

void Queue::ShutDown() {
  MutexLock lock(&mu_);
  drain_ = false;
  shutting_down_ = true;
}

void Queue::ShutDownWithDrain() {
  MutexLock lock(&mu_);
  drain_ = true;
  shutting_down_ = true;
  mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return processing_count_ == 0 || !drain_;
  });
}

bool Queue::ShuttingDown() const {
  MutexLock lock(&mu_);
  return shutting_down_;
}

void Queue::UpdateUnfinishedWork() {
  MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  double total = 0;
  double oldest = 0;
  for (const Item* item : in_flight_) {
    double age = absl::ToDoubleSeconds(now - item->second.started_at);
    total += age;
    oldest = std::max(oldest, age);
  }
  metrics_->unfinished_work_seconds->Set(total);
  metrics_->longest_running_processor->Set(oldest);
  if (!shutting_down_) unfinished_work_timer_->ArmAt(now + unfinished_work_update_period_);
}

}  // namespace informerd::workqueue
