#include "server/workqueue/queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::workqueue {
namespace {

// How long a Get on an empty queue spins before it parks. A producer on the other core usually
// delivers within this window, which saves both sides a futex wake-up per key.
constexpr absl::Duration kSpinBeforePark = absl::Microseconds(20);

// Free slots beyond this many give their key buffers back, bounding what a burst leaves behind
// while keeping steady-state traffic free of allocations.
constexpr size_t kFreeSlotsKeepingBuffers = 64 * 1024;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

absl::Status Queue::Validate(const QueueOptions& options) {
  if (options.unfinished_work_update_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("unfinished_work_update_period must be positive");
  }
  if (options.timer_slack < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timer_slack must not be negative");
  }
  if (options.priority_aging <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("priority_aging must be positive (InfiniteDuration: none)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Queue>> Queue::Create(QueueOptions options) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  return std::unique_ptr<Queue>(new Queue(std::move(options)));
}

Queue::Queue(QueueOptions options)
    : timer_slack_(options.timer_slack),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      name_(std::move(options.name)),
      metrics_(options.metrics_provider != nullptr && !name_.empty()
                   ? QueueMetrics::Create(*options.metrics_provider, name_)
                   : nullptr),
      unfinished_work_update_period_(options.unfinished_work_update_period),
      priority_aging_ns_(options.priority_aging == absl::InfiniteDuration()
                             ? INT64_MAX
                             : absl::ToInt64Nanoseconds(options.priority_aging)),
      last_token_(options.first_token) {
  if (metrics_ != nullptr) {
    unfinished_work_timer_ = clock_->CreateTimer([this] { UpdateUnfinishedWork(); });
    unfinished_work_timer_->ArmAt(clock_->Now() + unfinished_work_update_period_);
  }
}

Queue::~Queue() {
  ShutDown();
  unfinished_work_timer_.reset();  // waits for a running update
}

// ---- slots ----

Queue::SlotId Queue::SlotForLocked(absl::string_view key) {
  const uint32_t hash32 = Hash32(key);
  const SlotIndex::Found found = index_.Find(
      hash32, [&](uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[id].key == key; });
  if (found.id != SlotIndex::kNone) return found.id;
  SlotId id;
  if (free_head_ != kNoSlot) {
    id = free_head_;
    free_head_ = slots_[id].next;
    --free_count_;
  } else {
    id = static_cast<SlotId>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[id];
  slot.key.assign(key.data(), key.size());
  slot.hash32 = hash32;
  slot.next = kNoSlot;
  slot.index_pos = index_.Insert(
      hash32, id, [&](uint32_t moved, uint32_t pos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        slots_[moved].index_pos = pos;
      });
  return id;
}

Queue::SlotId Queue::FindLocked(absl::string_view key) {
  const SlotIndex::Found found = index_.Find(
      Hash32(key),
      [&](uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[id].key == key; });
  return found.id == SlotIndex::kNone ? kNoSlot : found.id;
}

void Queue::ReleaseIfIdleLocked(SlotId id) {
  const Slot& slot = slots_[id];
  if (slot.dirty || slot.processing || slot.waiting_seq != 0) return;
  FreeLocked(id);
}

void Queue::FreeLocked(SlotId id) {
  Slot& slot = slots_[id];
  index_.Erase(slot.index_pos);  // a store where the slot says: no probe
  if (free_count_ >= kFreeSlotsKeepingBuffers) {
    std::string().swap(slot.key);  // bound memory kept after a burst
  }
  slot.next = free_head_;
  free_head_ = id;
  ++free_count_;
}

// ---- FIFOs ----

Queue::Fifo& Queue::FifoLocked(int32_t priority) {
  return priority == kDefaultPriority ? default_fifo_ : other_fifos_[priority];
}

void Queue::PushBackLocked(SlotId id) {
  Slot& slot = slots_[id];
  Fifo& fifo = FifoLocked(slot.priority);
  slot.next = kNoSlot;
  slot.prev = fifo.tail;
  if (fifo.tail == kNoSlot) {
    fifo.head = id;
    if (slot.priority != kDefaultPriority) {
      // A key raised from the default priority may be unstamped (AddSlotLocked): it waits from
      // now.
      if (slot.added_at_ns == 0) slot.added_at_ns = absl::ToUnixNanos(clock_->Now());
      heads_.emplace(slot.added_at_ns, slot.priority);
    }
  } else {
    slots_[fifo.tail].next = id;
  }
  if (fifo.tail != kNoSlot && slot.priority != kDefaultPriority && slot.added_at_ns == 0) {
    slot.added_at_ns = absl::ToUnixNanos(clock_->Now());  // as above
  }
  fifo.tail = id;
  ++fifo.len;
  len_hint_.store(++len_, std::memory_order_release);
  if (parked_getters_ > 0) work_cv_.Signal();
}

void Queue::UnlinkLocked(SlotId id) {
  Slot& slot = slots_[id];
  Fifo& fifo = FifoLocked(slot.priority);
  if (slot.prev == kNoSlot) {
    fifo.head = slot.next;
    if (slot.priority != kDefaultPriority) {
      heads_.erase({slot.added_at_ns, slot.priority});
      if (slot.next != kNoSlot) heads_.emplace(slots_[slot.next].added_at_ns, slot.priority);
    }
  } else {
    slots_[slot.prev].next = slot.next;
  }
  if (slot.next == kNoSlot) {
    fifo.tail = slot.prev;
  } else {
    slots_[slot.next].prev = slot.prev;
  }
  slot.next = slot.prev = kNoSlot;
  --fifo.len;
  len_hint_.store(--len_, std::memory_order_release);
  if (fifo.len == 0 && slot.priority != kDefaultPriority) other_fifos_.erase(slot.priority);
}

Queue::Fifo& Queue::NextFifoLocked() {
  if (other_fifos_.empty()) return default_fifo_;  // no priorities in use: one FIFO
  // The highest priority with waiting keys.
  auto top = other_fifos_.begin();
  Fifo* next = top->first > kDefaultPriority || default_fifo_.len == 0 ? &top->second
                                                                       : &default_fifo_;
  if (priority_aging_ns_ == INT64_MAX) return *next;
  // Aging: the longest-waiting head that has waited priority_aging goes first (of equal waits,
  // the higher priority's), `next`'s own head included. The candidates: the oldest head of the
  // other FIFOs (the index's first entry) and the default FIFO's head.
  const int64_t now = absl::ToUnixNanos(clock_->Now());
  const int64_t overdue_at_or_before = now - priority_aging_ns_;
  Fifo* aged = nullptr;
  int64_t oldest = 0;
  int32_t oldest_priority = 0;
  if (!heads_.empty() && heads_.begin()->first <= overdue_at_or_before) {
    oldest = heads_.begin()->first;
    oldest_priority = heads_.begin()->second;
    aged = &other_fifos_.find(oldest_priority)->second;
  }
  if (default_fifo_.len > 0) {
    int64_t& added = slots_[default_fifo_.head].added_at_ns;
    if (added == 0) added = now;  // unstamped (see AddSlotLocked): it waits from now
    if (added <= overdue_at_or_before &&
        (aged == nullptr || added < oldest ||
         (added == oldest && kDefaultPriority > oldest_priority))) {
      aged = &default_fifo_;
    }
  }
  return aged != nullptr ? *aged : *next;
}

Queue::SlotId Queue::PopLocked() {
  Fifo& fifo = NextFifoLocked();
  const SlotId id = fifo.head;
  Slot& slot = slots_[id];
  if (slot.next != kNoSlot) {
    // The next Get will likely want the new head and its key: start fetching them now.
    Slot& next = slots_[slot.next];
    __builtin_prefetch(&next, 1);
    __builtin_prefetch(next.key.data());
  }
  if (&fifo == &default_fifo_) {
    // UnlinkLocked of a head of the default FIFO, which stays even when it empties.
    fifo.head = slot.next;
    if (slot.next == kNoSlot) {
      fifo.tail = kNoSlot;
    } else {
      slots_[slot.next].prev = kNoSlot;
    }
    slot.next = kNoSlot;
    --fifo.len;
    len_hint_.store(--len_, std::memory_order_release);
  } else {
    UnlinkLocked(id);
  }
  slot.dirty = false;
  slot.processing = true;
  slot.token = ++last_token_;
  ++processing_count_;
  if (metrics_ != nullptr) {
    int64_t now = absl::ToUnixNanos(clock_->Now());
    metrics_->depth->Dec();
    metrics_->queue_latency->Observe(static_cast<double>(now - slot.added_at_ns) * 1e-9);
    slot.started_at_ns = now;
    in_flight_.insert(id);
  }
  return id;
}

// ---- Add ----

absl::Status Queue::Add(absl::string_view key) {
  MutexLock lock(&mu_);
  return AddLocked(key, kDefaultPriority);
}

absl::Status Queue::Add(absl::string_view key, int32_t priority) {
  MutexLock lock(&mu_);
  return AddLocked(key, priority);
}

absl::Status Queue::Add(absl::string_view key, int32_t priority, bool initial_list) {
  MutexLock lock(&mu_);
  return AddLocked(key, priority, initial_list);
}

absl::Status Queue::AddLocked(absl::string_view key, int32_t priority, bool initial_list) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (shutting_down_) {
    return absl::FailedPreconditionError("queue is shutting down; key not added");
  }
  AddSlotLocked(SlotForLocked(key), priority, initial_list);
  return absl::OkStatus();
}

void Queue::AddSlotLocked(SlotId id, int32_t priority, bool initial_list) {
  Slot& slot = slots_[id];
  if (slot.dirty) {
    slot.initial_list = slot.initial_list && initial_list;
    // Already waiting (dedup): it keeps the higher priority, joining the back of that one's FIFO.
    if (priority <= slot.priority) return;
    if (slot.processing) {
      slot.priority = priority;  // Done queues it there
      return;
    }
    UnlinkLocked(id);
    slot.priority = priority;
    PushBackLocked(id);
    return;
  }
  slot.dirty = true;
  slot.priority = priority;
  slot.initial_list = initial_list;
  // Metrics and aging read it. Aging needs it only once keys of two priorities wait: without
  // metrics, a default-priority key added while no other priority waits is stamped when it
  // first competes with one (NextFifoLocked), which spares the clock read per Add.
  slot.added_at_ns = metrics_ != nullptr || priority != kDefaultPriority || !other_fifos_.empty()
                         ? absl::ToUnixNanos(clock_->Now())
                         : 0;
  if (metrics_ != nullptr) metrics_->adds->Inc();
  if (slot.processing) return;  // Done will re-queue it
  if (metrics_ != nullptr) metrics_->depth->Inc();
  PushBackLocked(id);
}

// ---- Get ----

void Queue::WaitForWorkLocked() {
  if (len_ > 0 || shutting_down_) return;
  mu_.Unlock();
  absl::Time give_up = absl::Now() + kSpinBeforePark;
  for (int spins = 1;; ++spins) {
    if (len_hint_.load(std::memory_order_acquire) > 0 ||
        shutdown_hint_.load(std::memory_order_acquire)) {
      break;
    }
    CpuRelax();
    if (spins % 64 == 0 && absl::Now() >= give_up) break;
  }
  mu_.Lock();
  while (len_ == 0 && !shutting_down_) {
    ++parked_getters_;
    work_cv_.Wait(&mu_);
    --parked_getters_;
  }
}

bool Queue::Get(std::string* key) {
  MutexLock lock(&mu_);
  WaitForWorkLocked();
  if (len_ == 0) return false;
  key->assign(slots_[PopLocked()].key);
  return true;
}

void Queue::FillLeaseLocked(SlotId id, Lease* lease) {
  const Slot& slot = slots_[id];
  lease->key.assign(slot.key);
  lease->token = slot.token;
  lease->slot = id;
  lease->priority = slot.priority;
  lease->initial_list = slot.initial_list;
}

bool Queue::Get(Lease* lease) {
  MutexLock lock(&mu_);
  WaitForWorkLocked();
  if (len_ == 0) return false;
  FillLeaseLocked(PopLocked(), lease);
  return true;
}

size_t Queue::GetBatch(size_t max, std::vector<Lease>* leases) {
  MutexLock lock(&mu_);
  WaitForWorkLocked();
  size_t n = std::min(std::max<size_t>(max, 1), len_);
  leases->resize(n);
  for (size_t i = 0; i < n; ++i) FillLeaseLocked(PopLocked(), &(*leases)[i]);
  return n;
}

size_t Queue::TryGetBatch(size_t max, std::vector<Lease>* out) {
  MutexLock lock(&mu_);
  size_t n = std::min(max, len_);
  for (size_t i = 0; i < n; ++i) FillLeaseLocked(PopLocked(), &out->emplace_back());
  return n;
}

std::optional<std::string> Queue::Get() {
  std::string key;
  if (!Get(&key)) return std::nullopt;
  return key;
}

size_t Queue::GetBatch(size_t max, std::vector<std::string>* keys) {
  MutexLock lock(&mu_);
  WaitForWorkLocked();
  size_t n = std::min(std::max<size_t>(max, 1), len_);
  keys->resize(n);
  for (size_t i = 0; i < n; ++i) (*keys)[i].assign(slots_[PopLocked()].key);
  return n;
}

std::vector<std::string> Queue::GetBatch(size_t max) {
  std::vector<std::string> keys;
  GetBatch(max, &keys);
  return keys;
}

size_t Queue::TryGetBatch(size_t max, std::vector<std::string>* out) {
  MutexLock lock(&mu_);
  size_t n = std::min(max, len_);
  for (size_t i = 0; i < n; ++i) out->push_back(slots_[PopLocked()].key);
  return n;
}

// ---- Done ----

absl::Status Queue::Done(absl::string_view key) {
  MutexLock lock(&mu_);
  const SlotId id = FindLocked(key);
  if (id == kNoSlot || !slots_[id].processing) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", key, "\" is not being processed; Done ignored"));
  }
  DoneLocked(id);
  return absl::OkStatus();
}

absl::Status Queue::Done(const Lease& lease) {
  MutexLock lock(&mu_);
  if (!CurrentLocked(lease.slot, lease.token)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease of key \"", lease.key, "\" with token ", lease.token,
        " is not current (already done, or the key was handed out again); Done ignored"));
  }
  DoneLocked(lease.slot);
  return absl::OkStatus();
}

size_t Queue::DoneAll(absl::Span<const HandOut> ends) {
  MutexLock lock(&mu_);
  auto current = [&](const HandOut& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CurrentLocked(e.slot, e.token);
  };
  // Two passes of prefetches before the work: the slots, then the index entries of the keys that
  // will leave it (neither added again nor waiting).
  for (const HandOut& e : ends) {
    if (e.slot < slots_.size()) __builtin_prefetch(&slots_[e.slot]);
  }
  for (const HandOut& e : ends) {
    if (!current(e)) continue;
    const Slot& slot = slots_[e.slot];
    if (!slot.dirty && slot.waiting_seq == 0) index_.PrefetchForErase(slot.index_pos);
  }
  size_t ended = 0;
  for (const HandOut& e : ends) {
    if (!current(e)) continue;
    DoneLocked(e.slot);
    ++ended;
  }
  return ended;
}

bool Queue::CurrentLocked(uint32_t slot, uint64_t token) const {
  // Tokens are unique across the queue's life, so a matching token on a processing slot is that
  // very hand-out; anything else is stale.
  return slot < slots_.size() && slots_[slot].processing && slots_[slot].token == token;
}

void Queue::DoneLocked(SlotId id) {
  Slot& slot = slots_[id];
  slot.processing = false;
  --processing_count_;
  if (metrics_ != nullptr) {
    int64_t now = absl::ToUnixNanos(clock_->Now());
    metrics_->work_duration->Observe(static_cast<double>(now - slot.started_at_ns) * 1e-9);
    in_flight_.erase(id);
  }
  if (slot.dirty) {
    if (metrics_ != nullptr) metrics_->depth->Inc();
    PushBackLocked(id);
  } else if (slot.waiting_seq == 0) {
    FreeLocked(id);
  }
}

// ---- state and shutdown ----

size_t Queue::Len() const {
  MutexLock lock(&mu_);
  return len_;
}

absl::Status Queue::SetPriorityAging(absl::Duration aging) {
  if (aging <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("priority_aging must be positive (InfiniteDuration: none)");
  }
  MutexLock lock(&mu_);
  priority_aging_ns_ =
      aging == absl::InfiniteDuration() ? INT64_MAX : absl::ToInt64Nanoseconds(aging);
  return absl::OkStatus();
}

std::vector<std::pair<int32_t, size_t>> Queue::LenByPriority(size_t max_entries) const {
  MutexLock lock(&mu_);
  std::vector<std::pair<int32_t, size_t>> out;
  size_t counted = 0;
  // Appends one priority's count, or, once max_entries - 1 are out, the rest summed; false when
  // done.
  auto emit = [&](int32_t priority, size_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (out.size() + 1 >= max_entries) {
      out.emplace_back(priority, len_ - counted);
      return false;
    }
    out.emplace_back(priority, len);
    counted += len;
    return true;
  };
  bool default_done = default_fifo_.len == 0;
  for (const auto& [priority, fifo] : other_fifos_) {
    if (!default_done && priority < kDefaultPriority) {
      default_done = true;
      if (!emit(kDefaultPriority, default_fifo_.len)) return out;
    }
    if (!emit(priority, fifo.len)) return out;
  }
  if (!default_done) emit(kDefaultPriority, default_fifo_.len);
  return out;
}

size_t Queue::LenAtPriority(int32_t priority) const {
  MutexLock lock(&mu_);
  if (priority == kDefaultPriority) return default_fifo_.len;
  auto it = other_fifos_.find(priority);
  return it == other_fifos_.end() ? 0 : it->second.len;
}

size_t Queue::Processing() const {
  MutexLock lock(&mu_);
  return processing_count_;
}

int Queue::ParkedGetters() const {
  MutexLock lock(&mu_);
  return parked_getters_;
}

void Queue::ShutDown() {
  MutexLock lock(&mu_);
  drain_ = false;
  shutting_down_ = true;
  shutdown_hint_.store(true, std::memory_order_release);
  work_cv_.SignalAll();
}

void Queue::ShutDownWithDrain() {
  MutexLock lock(&mu_);
  drain_ = true;
  shutting_down_ = true;
  shutdown_hint_.store(true, std::memory_order_release);
  work_cv_.SignalAll();
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
  int64_t now = absl::ToUnixNanos(clock_->Now());
  double total = 0;
  double oldest = 0;
  for (SlotId id : in_flight_) {
    double age = static_cast<double>(now - slots_[id].started_at_ns) * 1e-9;
    total += age;
    oldest = std::max(oldest, age);
  }
  metrics_->unfinished_work_seconds->Set(total);
  metrics_->longest_running_processor->Set(oldest);
  if (!shutting_down_) {
    unfinished_work_timer_->ArmAt(absl::FromUnixNanos(now) + unfinished_work_update_period_);
  }
}

}  // namespace informerd::workqueue
