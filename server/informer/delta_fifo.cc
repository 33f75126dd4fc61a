#include "server/informer/delta_fifo.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace informerd::informer {

absl::string_view DeltaTypeName(DeltaType type) {
  switch (type) {
    case DeltaType::kAdded:
      return "Added";
    case DeltaType::kUpdated:
      return "Updated";
    case DeltaType::kDeleted:
      return "Deleted";
    case DeltaType::kReplaced:
      return "Replaced";
    case DeltaType::kSync:
      return "Sync";
  }
  return "Unknown";
}

absl::StatusOr<std::unique_ptr<DeltaFIFO>> DeltaFIFO::Create(Options options) {
  return std::unique_ptr<DeltaFIFO>(new DeltaFIFO(std::move(options)));
}

DeltaFIFO::DeltaFIFO(Options options)
    : known_objects_(options.known_objects),
      emit_delta_type_replaced_(options.emit_delta_type_replaced),
      on_idle_resource_version_(std::move(options.on_idle_resource_version)),
      on_ready_(std::move(options.on_ready)) {}

DeltaFIFO::~DeltaFIFO() = default;

// ---- producer side ----

void DeltaFIFO::Readied() {
  if (on_ready_) on_ready_();
}

void DeltaFIFO::RecordResourceVersionLocked(absl::string_view rv) {
  if (!rv.empty()) latest_rv_.assign(rv.data(), rv.size());
}

void DeltaFIFO::QueueActionLocked(DeltaType type, ObjectPtr object, bool final_state_unknown) {
  const absl::string_view key = object->key();
  auto it = items_.find(key);
  if (it == items_.end()) {
    Item item;
    item.key_owner = object;
    const absl::string_view owned_key = item.key_owner->key();
    item.deltas.push_back(Delta{type, std::move(object), final_state_unknown});
    items_.emplace(owned_key, std::move(item));
    queue_.push_back(owned_key);
    if (queue_.size() == 1) Readied();
    return;
  }
  Deltas& deltas = it->second.deltas;
  deltas.push_back(Delta{type, std::move(object), final_state_unknown});
  // client-go's dedupDeltas: only two consecutive deletions are merged, keeping the one that is
  // not a tombstone (the later one when neither is).
  const size_t n = deltas.size();
  if (n >= 2 && deltas[n - 1].type == DeltaType::kDeleted &&
      deltas[n - 2].type == DeltaType::kDeleted) {
    if (!deltas[n - 1].final_state_unknown) deltas[n - 2] = std::move(deltas[n - 1]);
    deltas.pop_back();
  }
}

void DeltaFIFO::Add(ObjectPtr object) {
  MutexLock lock(&mu_);
  populated_ = true;
  RecordResourceVersionLocked(object->resource_version());
  QueueActionLocked(DeltaType::kAdded, std::move(object), false);
}

void DeltaFIFO::Update(ObjectPtr object) {
  MutexLock lock(&mu_);
  populated_ = true;
  RecordResourceVersionLocked(object->resource_version());
  QueueActionLocked(DeltaType::kUpdated, std::move(object), false);
}

void DeltaFIFO::Delete(ObjectPtr object) {
  MutexLock process_lock(&process_mu_);
  {
    MutexLock lock(&mu_);
    populated_ = true;
    RecordResourceVersionLocked(object->resource_version());
    const absl::string_view key = object->key();
    // Skip the deletion only when the key is neither queued nor known: it was presumably deleted
    // by a relist already. (A queued Deleted is deduplicated by QueueActionLocked.)
    const bool ignore = !items_.contains(key) &&
                        (known_objects_ == nullptr || known_objects_->GetByKey(key) == nullptr);
    if (!ignore) QueueActionLocked(DeltaType::kDeleted, std::move(object), false);
  }
  ReportIdleResourceVersion();
}

void DeltaFIFO::Replace(std::vector<ObjectPtr> list, std::string resource_version) {
  MutexLock process_lock(&process_mu_);
  {
    MutexLock lock(&mu_);
    const DeltaType action = emit_delta_type_replaced_ ? DeltaType::kReplaced : DeltaType::kSync;
    // Views into the listed objects, which stay alive in the queued deltas.
    absl::flat_hash_set<absl::string_view, StringHash, StringEq> keys;
    keys.reserve(list.size());
    for (const ObjectPtr& object : list) keys.insert(object->key());
    for (ObjectPtr& object : list) QueueActionLocked(action, std::move(object), false);
    list.clear();

    // Deletions among queued keys (e.g. an Added whose object is gone by now).
    size_t queued_deletions = 0;
    for (auto& [key, item] : items_) {
      if (keys.contains(key)) continue;
      // A tombstone's object is already the inner object.
      ObjectPtr last = item.deltas.back().object;
      ++queued_deletions;
      Deltas& deltas = item.deltas;
      if (deltas.back().type != DeltaType::kDeleted) {
        deltas.push_back(Delta{DeltaType::kDeleted, std::move(last), true});
      }
      // else: Deleted followed by a tombstone dedups to the Deleted already there.
    }
    // Deletions among known objects with nothing queued.
    if (known_objects_ != nullptr) {
      // Keys first, then only the deleted objects whole (a tombstone carries the last known
      // state): a compressed cache then decompresses those few, not every object it holds. The
      // cache does not change meanwhile: it is written under process_mu_.
      std::vector<std::string> gone;
      known_objects_->ForEachKey([&](absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (!keys.contains(key) && !items_.contains(key)) gone.emplace_back(key);
      });
      for (const std::string& key : gone) {
        ObjectPtr object = known_objects_->GetByKey(key);
        if (object == nullptr) continue;
        ++queued_deletions;
        QueueActionLocked(DeltaType::kDeleted, std::move(object), true);
      }
    }
    if (!populated_) {
      populated_ = true;
      initial_population_count_ = keys.size() + queued_deletions;
    }
    RecordResourceVersionLocked(resource_version);
  }
  ReportIdleResourceVersion();
}

void DeltaFIFO::Resync() {
  MutexLock process_lock(&process_mu_);
  MutexLock lock(&mu_);
  if (known_objects_ == nullptr) return;
  known_objects_->ForEach([&](const ObjectPtr& object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A key with anything queued is skipped: its queued change is newer than the cache, and a
    // Sync after a queued Deleted would recreate the object.
    if (items_.contains(object->key())) return;
    QueueActionLocked(DeltaType::kSync, object, false);
  });
}

void DeltaFIFO::UpdateResourceVersion(std::string resource_version) {
  MutexLock process_lock(&process_mu_);
  {
    MutexLock lock(&mu_);
    RecordResourceVersionLocked(resource_version);
  }
  ReportIdleResourceVersion();
}

void DeltaFIFO::ReportIdleResourceVersion() {
  if (!on_idle_resource_version_) return;
  std::string rv;
  {
    MutexLock lock(&mu_);
    if (!queue_.empty() || latest_rv_.empty()) return;
    rv = latest_rv_;
  }
  // process_mu_ is held: no item is being processed, and none can start before this returns.
  on_idle_resource_version_(rv);
}

absl::Status DeltaFIFO::AddIfNotPresent(Deltas deltas) {
  if (deltas.empty()) return absl::InvalidArgumentError("AddIfNotPresent of empty deltas");
  MutexLock lock(&mu_);
  populated_ = true;
  const ObjectPtr& newest = deltas.back().object;
  if (items_.contains(newest->key())) return absl::OkStatus();
  Item item;
  item.key_owner = newest;
  const absl::string_view key = item.key_owner->key();
  item.deltas = std::move(deltas);
  items_.emplace(key, std::move(item));
  queue_.push_back(key);
  if (queue_.size() == 1) Readied();
  return absl::OkStatus();
}

// ---- consumer side ----

absl::Status DeltaFIFO::TryPopBatch(size_t max, ProcessFunc process) {
  MutexLock process_lock(&process_mu_);
  std::optional<absl::Status> status = PopFront(max, process);
  if (!status.has_value()) return absl::UnavailableError("DeltaFIFO: nothing queued");
  return *std::move(status);
}

std::optional<absl::Status> DeltaFIFO::PopFront(size_t max, ProcessFunc process) {
  struct Popped {
    Item item;
    PopContext context;
    bool counted = false;
  };
  absl::InlinedVector<Popped, 16> batch;
  {
    MutexLock lock(&mu_);
    if (queue_.empty()) return std::nullopt;
    const size_t n = std::min(std::max<size_t>(max, 1), queue_.size());
    for (size_t i = 0; i < n; ++i) {
      Popped& p = batch.emplace_back();
      // As if popped one by one, each after the previous was processed: the i-th item of the
      // batch sees the initial population i items smaller.
      const bool count_left = initial_population_count_ > i;
      p.context.is_in_initial_list = !populated_ || count_left;
      p.counted = count_left;
      const absl::string_view key = queue_.front();
      queue_.pop_front();
      auto it = items_.find(key);
      p.item = std::move(it->second);
      items_.erase(it);
    }
    if (queue_.empty()) batch.back().context.drained_resource_version = latest_rv_;
  }
  absl::Status result;
  for (Popped& p : batch) {
    absl::Status status = process(p.item.deltas, p.context);
    if (result.ok()) result = std::move(status);
    if (p.counted) {
      MutexLock lock(&mu_);
      --initial_population_count_;
    }
  }
  return result;
}

// ---- inspection ----

bool DeltaFIFO::HasSynced() const {
  MutexLock lock(&mu_);
  return HasSyncedLocked();
}

size_t DeltaFIFO::Len() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

std::vector<std::string> DeltaFIFO::ListKeys() const {
  MutexLock lock(&mu_);
  std::vector<std::string> keys;
  keys.reserve(queue_.size());
  for (absl::string_view key : queue_) keys.emplace_back(key);
  return keys;
}

std::vector<ObjectPtr> DeltaFIFO::List() const {
  MutexLock lock(&mu_);
  std::vector<ObjectPtr> objects;
  objects.reserve(queue_.size());
  for (absl::string_view key : queue_) objects.push_back(items_.at(key).deltas.back().object);
  return objects;
}

Deltas DeltaFIFO::GetByKey(absl::string_view key) const {
  MutexLock lock(&mu_);
  auto it = items_.find(key);
  return it == items_.end() ? Deltas() : it->second.deltas;
}

}  // namespace informerd::informer
