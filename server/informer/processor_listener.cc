#include "server/informer/processor_listener.h"

#include <algorithm>
#include <pthread.h>

#include <utility>


namespace informerd::informer {
namespace {
constexpr size_t kHandlerBatch = 256;
}  // namespace

ProcessorListener::ProcessorListener(Options options, OverflowResolver* resolver,
                                     std::function<bool()> upstream_synced)
    : options_(std::move(options)),
      resolver_(resolver),
      upstream_synced_(std::move(upstream_synced)) {}

ProcessorListener::~ProcessorListener() { Stop(); }

// ---- informer side ----

void ProcessorListener::SetInitial(std::unique_ptr<ObjectSnapshot> objects) {
  bool notify = false;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    sync_pending_ += objects->size();
    initial_ = std::move(objects);
    initial_next_ = 0;
    if (initial_->size() > 0 && waiting_) {
      waiting_ = false;
      cv_.SignalAll();
      notify = true;
    }
  }
  if (notify && options_.on_ready) options_.on_ready();
}

namespace {

size_t BytesOf(const Notification& n) {
  return (n.object != nullptr ? n.object->allocated_bytes() : 0) +
         (n.old_object != nullptr ? n.old_object->allocated_bytes() : 0);
}

}  // namespace

void ProcessorListener::CoalesceLocked(Notification n) {
  if (n.type == Notification::Type::kResnapshot || n.object == nullptr) return;
  if (n.counts_for_sync ||
      (n.is_in_initial_list && !synced_latch_.load(std::memory_order_relaxed))) {
    initial_coalesced_ = true;
  }
  auto [it, inserted] = dirty_.try_emplace(n.object->key());
  Dirty& dirty = it->second;
  if (inserted) {
    // What the handler last saw of this key: nothing before an Add, the old state before an
    // Update, the object itself before a Delete.
    switch (n.type) {
      case Notification::Type::kAdd:
        break;
      case Notification::Type::kUpdate:
        dirty.seen = n.old_object;
        break;
      default:
        dirty.seen = n.object;
        break;
    }
  }
  dirty.last_deleted = n.type == Notification::Type::kDelete;
  dirty.last_final_state_unknown = n.final_state_unknown;
  dirty.last = std::move(n.object);
}

void ProcessorListener::Wake() {
  bool notify = false;
  {
    MutexLock lock(&mu_);
    if (!wake_due_) return;
    wake_due_ = false;
    if (waiting_) {
      waiting_ = false;
      cv_.SignalAll();
      notify = true;
    }
  }
  if (notify && options_.on_ready) options_.on_ready();
}

void ProcessorListener::Push(Notification n, bool wake) {
  bool notify = false;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    if (overflowed_) {
      CoalesceLocked(std::move(n));
      return;
    }
    const size_t bytes = BytesOf(n);
    if (pending_.size() >= options_.buffer_size ||
        (options_.buffer_bytes > 0 && !pending_.empty() &&
         pending_bytes_ + bytes > options_.buffer_bytes)) {
      // Too far behind: keep only which keys changed from here on.
      overflowed_ = true;
      overflows_.fetch_add(1, std::memory_order_relaxed);
      for (Notification& queued : pending_) {
        if (queued.counts_for_sync) --sync_pending_;
        CoalesceLocked(std::move(queued));
      }
      pending_.clear();
      pending_.shrink_to_fit();
      pending_bytes_ = 0;
      CoalesceLocked(std::move(n));
    } else {
      n.counts_for_sync = n.is_in_initial_list && !synced_latch_.load(std::memory_order_relaxed);
      if (n.counts_for_sync) ++sync_pending_;
      pending_bytes_ += bytes;
      pending_.push_back(std::move(n));
    }
    if (waiting_) {
      if (wake) {
        waiting_ = false;
        wake_due_ = false;
        cv_.SignalAll();
        notify = true;
      } else {
        wake_due_ = true;
      }
    }
  }
  if (notify && options_.on_ready) options_.on_ready();
}

void ProcessorListener::FinishOverflow(absl::FunctionRef<ObjectPtr(absl::string_view key)> lookup) {
  absl::flat_hash_map<std::string, Dirty, StringHash, StringEq> dirty;
  // The re-snapshot is part of this listener's initial list if the listener has not synced and
  // either the informer has not either or initial-list notifications were coalesced.
  const bool upstream_synced = upstream_synced_();
  bool initial = false;
  {
    MutexLock lock(&mu_);
    if (!overflowed_ || stopped_) return;
    dirty.swap(dirty_);
    overflowed_ = false;
    initial = !synced_latch_.load(std::memory_order_relaxed) &&
              (initial_coalesced_ || !upstream_synced);
    initial_coalesced_ = false;
  }
  std::vector<Notification> resolved;
  resolved.reserve(dirty.size());
  for (auto& [key, d] : dirty) {
    ObjectPtr current = lookup(key);
    Notification n;
    if (current != nullptr) {
      if (d.seen == nullptr) {
        n.type = Notification::Type::kAdd;
        n.is_in_initial_list = initial;
      } else {
        n.type = Notification::Type::kUpdate;
        n.old_object = std::move(d.seen);
      }
      n.object = std::move(current);
    } else if (d.seen != nullptr) {
      n.type = Notification::Type::kDelete;
      n.object = d.last_deleted ? std::move(d.last) : std::move(d.seen);
      n.final_state_unknown = d.last_deleted ? d.last_final_state_unknown : true;
    } else {
      continue;  // created and deleted while coalesced: the handler never needs to know
    }
    resolved.push_back(std::move(n));
  }
  dirty.clear();
  MutexLock lock(&mu_);
  if (stopped_) return;
  Notification marker;
  marker.type = Notification::Type::kResnapshot;
  marker.resnapshot_keys = resolved.size();
  pending_.push_back(std::move(marker));
  for (Notification& n : resolved) {
    n.counts_for_sync = initial;
    if (initial) ++sync_pending_;
    pending_bytes_ += BytesOf(n);
    pending_.push_back(std::move(n));
  }
}

bool ProcessorListener::ShouldResync(absl::Time now) {
  MutexLock lock(&mu_);
  bool due = false;
  if (options_.resync_period > absl::ZeroDuration() && now >= next_resync_) {
    next_resync_ = now + options_.resync_period;
    due = true;
  }
  syncing_.store(due, std::memory_order_relaxed);
  return due;
}

absl::Time ProcessorListener::next_resync() const {
  MutexLock lock(&mu_);
  return next_resync_;
}

void ProcessorListener::ScheduleFirstResync(absl::Time now) {
  MutexLock lock(&mu_);
  if (options_.resync_period > absl::ZeroDuration()) next_resync_ = now + options_.resync_period;
}

// ---- consumer side ----

void ProcessorListener::Start() {
  if (options_.handler == nullptr) return;
  MutexLock lock(&mu_);
  if (stopped_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
  pthread_setname_np(thread_.native_handle(), "handler");
}

void ProcessorListener::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  // Free what is buffered.
  std::deque<Notification>().swap(pending_);
  pending_bytes_ = 0;
  initial_.reset();
  initial_next_ = 0;
  absl::flat_hash_map<std::string, Dirty, StringHash, StringEq>().swap(dirty_);
}

bool ProcessorListener::Pop(size_t max, std::vector<Notification>* out, bool wait) {
  if (max == 0) max = 1;
  for (;;) {
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopped_) return false;
        if (initial_ != nullptr && initial_next_ < initial_->size()) {
          const size_t n = std::min(max, initial_->size() - initial_next_);
          size_t lost = 0;
          for (size_t i = 0; i < n; ++i) {
            ObjectPtr object = initial_->Take(initial_next_++);
            if (object == nullptr) {  // could not be unpacked (logged by the store)
              ++lost;
              continue;
            }
            Notification add;
            add.type = Notification::Type::kAdd;
            add.object = std::move(object);
            add.is_in_initial_list = true;
            add.counts_for_sync = true;
            out->push_back(std::move(add));
          }
          sync_pending_ -= std::min(sync_pending_, lost);  // they never reach Done
          if (initial_next_ == initial_->size()) {
            initial_.reset();
            initial_next_ = 0;
          }
          if (lost < n) return true;
          continue;
        }
        if (!pending_.empty()) {
          const size_t n = std::min(max, pending_.size());
          for (size_t i = 0; i < n; ++i) {
            pending_bytes_ -= std::min(pending_bytes_, BytesOf(pending_.front()));
            out->push_back(std::move(pending_.front()));
            pending_.pop_front();
          }
          return true;
        }
        if (overflowed_) break;  // resolve below, without this lock
        waiting_ = true;
        if (!wait) return true;
        cv_.Wait(&mu_);
      }
    }
    // Coalesced keys: the informer pauses its distribution and calls FinishOverflow.
    resolver_->ResolveOverflow(this);
  }
}

void ProcessorListener::Done(const std::vector<Notification>& handled) {
  size_t counted = 0;
  for (const Notification& n : handled) counted += n.counts_for_sync ? 1 : 0;
  delivered_.fetch_add(handled.size(), std::memory_order_relaxed);
  if (counted == 0) return;
  MutexLock lock(&mu_);
  sync_pending_ -= std::min(sync_pending_, counted);
}

bool ProcessorListener::HasSynced() const {
  if (synced_latch_.load(std::memory_order_acquire)) return true;
  if (!upstream_synced_()) return false;
  MutexLock lock(&mu_);
  if (sync_pending_ == 0 && !overflowed_) synced_latch_.store(true, std::memory_order_release);
  return synced_latch_.load(std::memory_order_relaxed);
}

size_t ProcessorListener::pending() const {
  MutexLock lock(&mu_);
  return pending_.size() + dirty_.size() +
         (initial_ != nullptr ? initial_->size() - initial_next_ : 0);
}

size_t ProcessorListener::pending_bytes() const {
  MutexLock lock(&mu_);
  return pending_bytes_;
}

void ProcessorListener::Run() {
  std::vector<Notification> batch;
  ResourceEventHandler& handler = *options_.handler;
  while (Pop(kHandlerBatch, &batch, /*wait=*/true)) {
    for (const Notification& n : batch) {
      switch (n.type) {
        case Notification::Type::kAdd:
          handler.OnAdd(n.object, n.is_in_initial_list);
          break;
        case Notification::Type::kUpdate:
          handler.OnUpdate(n.old_object, n.object);
          break;
        case Notification::Type::kDelete:
          handler.OnDelete(n.object, n.final_state_unknown);
          break;
        case Notification::Type::kResnapshot:
          handler.OnResnapshot(n.resnapshot_keys);
          break;
      }
    }
    Done(batch);
    batch.clear();
  }
}

}  // namespace informerd::informer
