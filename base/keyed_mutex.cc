#include "base/keyed_mutex.h"

namespace informerd {

KeyedMutex::Lock::Lock(KeyedMutex* locks, absl::string_view key) : locks_(locks), key_(key) {
  MutexLock l(&locks_->mu_);
  std::unique_ptr<Entry>& slot = locks_->entries_[key_];
  if (slot == nullptr) slot = std::make_unique<Entry>();
  Entry* entry = slot.get();
  ++entry->waiting;
  locks_->mu_.Await([entry] { return !entry->held; });
  --entry->waiting;
  entry->held = true;
}

KeyedMutex::Lock::~Lock() {
  MutexLock l(&locks_->mu_);
  auto it = locks_->entries_.find(key_);
  it->second->held = false;
  if (it->second->waiting == 0) locks_->entries_.erase(it);
  // Unlocking mu_ wakes the waiters, which re-check their entry.
}

size_t KeyedMutex::size() const {
  MutexLock l(&mu_);
  return entries_.size();
}

}  // namespace informerd
