#include "server/informer/thread_safe_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::informer {
namespace {

// glibc malloc's per-chunk header, counted once per allocation.
constexpr size_t kMallocOverhead = 16;

}  // namespace

size_t ApproximateObjectBytes(const client::Object& object) {
  // The Object, its control block and all its bytes are one allocation.
  return object.allocated_bytes();
}

// ---- ValueList ----

void ThreadSafeStore::ValueList::Add(absl::string_view v) {
  if (Contains(v)) return;
  if (size_ == values_.size()) values_.emplace_back();
  values_[size_++].assign(v.data(), v.size());
}

bool ThreadSafeStore::ValueList::Contains(absl::string_view v) const {
  for (size_t i = 0; i < size_; ++i) {
    if (values_[i] == v) return true;
  }
  return false;
}

// ---- construction ----

absl::StatusOr<std::unique_ptr<ThreadSafeStore>> ThreadSafeStore::Create(StoreOptions options) {
  std::unique_ptr<ThreadSafeStore> store(new ThreadSafeStore());
  MutexLock lock(&store->mu_);
  IndexData ns;
  ns.function = IndexFunction::Create(IndexSpec::Namespace()).value();
  store->indexes_.push_back(std::move(ns));
  if (absl::Status s = store->AddIndexersLocked(std::move(options.indexers)); !s.ok()) return s;
  return store;
}

ThreadSafeStore::~ThreadSafeStore() = default;

// ---- writes ----

ThreadSafeStore::SlotId ThreadSafeStore::FindLocked(absl::string_view key) const {
  auto it = keys_.find(HashedKey{key, Hash32(key)});
  if (it == keys_.end()) return ~SlotId{0};
  return *it;
}

ThreadSafeStore::SlotId ThreadSafeStore::NewSlotLocked() {
  if (free_count_ > 0) {
    const SlotId id = free_head_;
    free_head_ = slots_[id].next_free;
    --free_count_;
    slots_[id].epoch = 0;
    return id;
  }
  if (slots_.size() == slots_.capacity()) {
    slots_.reserve(slots_.capacity() + std::max<size_t>(slots_.capacity() / 8, 64));
  }
  slots_.emplace_back();
  return static_cast<SlotId>(slots_.size() - 1);
}

ObjectPtr ThreadSafeStore::UpdateLocked(ObjectPtr object, uint32_t epoch) {
  const absl::string_view key = object->key();
  const HashedKey hashed{key, Hash32(key)};
  auto it = keys_.find(hashed);
  if (it != keys_.end()) {
    const SlotId id = *it;
    Slot& slot = slots_[id];
    slot.epoch = epoch;
    if (slot.object == object) return slot.object;  // the very object: nothing changes
    ReindexLocked(id, slot.object.get(), object.get());
    object_bytes_ += ApproximateObjectBytes(*object);
    object_bytes_ -= ApproximateObjectBytes(*slot.object);
    // The key index compares against the slot's key, which is the same string in both objects.
    std::swap(slot.object, object);
    return object;
  }
  const SlotId id = NewSlotLocked();
  Slot& slot = slots_[id];
  slot.object = std::move(object);
  slot.hash32 = hashed.hash32;
  slot.epoch = epoch;
  keys_.insert(id);
  object_bytes_ += ApproximateObjectBytes(*slot.object);
  ReindexLocked(id, nullptr, slot.object.get());
  return nullptr;
}

ObjectPtr ThreadSafeStore::RemoveSlotLocked(SlotId id) {
  Slot& slot = slots_[id];
  ReindexLocked(id, slot.object.get(), nullptr);
  keys_.erase(id);  // before the slot is freed: the key index reads its hash32
  object_bytes_ -= ApproximateObjectBytes(*slot.object);
  ObjectPtr removed = std::move(slot.object);
  slot.object = nullptr;
  slot.next_free = free_head_;
  free_head_ = id;
  ++free_count_;
  return removed;
}

void ThreadSafeStore::ReindexLocked(SlotId id, const client::Object* old_object,
                                    const client::Object* new_object) {
  for (IndexData& index : indexes_) ReindexOneLocked(index, id, old_object, new_object);
}

void ThreadSafeStore::ReindexOneLocked(IndexData& index, SlotId id,
                                       const client::Object* old_object,
                                       const client::Object* new_object) {
  if (old_object != nullptr && new_object != nullptr) {
    // The common update keeps the namespace and the indexed label: nothing to move.
    const IndexSpec& spec = index.function->spec();
    if (spec.kind == IndexSpec::Kind::kNamespace &&
        old_object->namespace_name() == new_object->namespace_name()) {
      return;
    }
    if (spec.kind == IndexSpec::Kind::kLabel &&
        old_object->label(spec.argument) == new_object->label(spec.argument)) {
      return;
    }
  }
  old_values_.Clear();
  new_values_.Clear();
  if (old_object != nullptr) {
    index.function->Values(*old_object, [&](absl::string_view v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { old_values_.Add(v); });
  }
  if (new_object != nullptr) {
    index.function->Values(*new_object, [&](absl::string_view v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { new_values_.Add(v); });
  }
  for (size_t i = 0; i < old_values_.size(); ++i) {
    const std::string& value = old_values_[i];
    if (new_values_.Contains(value)) continue;
    auto it = index.values.find(value);
    if (it == index.values.end()) continue;
    it->second.erase(id);
    if (it->second.empty()) index.values.erase(it);
  }
  for (size_t i = 0; i < new_values_.size(); ++i) {
    const std::string& value = new_values_[i];
    if (old_values_.Contains(value)) continue;
    index.values[value].insert(id);
  }
}

ObjectPtr ThreadSafeStore::Update(ObjectPtr object) {
  MutexLock lock(&mu_);
  return UpdateLocked(std::move(object), epoch_);
}

ObjectPtr ThreadSafeStore::Delete(absl::string_view key) {
  MutexLock lock(&mu_);
  const SlotId id = FindLocked(key);
  if (id == ~SlotId{0}) return nullptr;
  return RemoveSlotLocked(id);
}

void ThreadSafeStore::Replace(std::vector<ObjectPtr> objects, std::string resource_version) {
  std::vector<ObjectPtr> removed;  // released after the lock
  MutexLock lock(&mu_);
  const uint32_t epoch = ++epoch_;
  for (ObjectPtr& object : objects) {
    ObjectPtr previous = UpdateLocked(std::move(object), epoch);
    if (previous != nullptr) removed.push_back(std::move(previous));
    if (removed.size() > 1024) removed.clear();  // bound the deferred releases
  }
  objects.clear();
  for (SlotId id = 0; id < slots_.size(); ++id) {
    if (slots_[id].object != nullptr && slots_[id].epoch != epoch) {
      removed.push_back(RemoveSlotLocked(id));
      if (removed.size() > 1024) removed.clear();
    }
  }
  resource_version_ = std::move(resource_version);
}

void ThreadSafeStore::SetResourceVersion(std::string resource_version) {
  MutexLock lock(&mu_);
  resource_version_ = std::move(resource_version);
}

// ---- reads ----

GetResult ThreadSafeStore::Get(absl::string_view key) const {
  GetResult result;
  MutexLock lock(&mu_);
  const SlotId id = FindLocked(key);
  if (id != ~SlotId{0}) result.object = slots_[id].object;
  result.resource_version = resource_version_;
  return result;
}

ListResult ThreadSafeStore::List() const {
  ListResult result;
  MutexLock lock(&mu_);
  result.objects.reserve(keys_.size());
  for (const Slot& slot : slots_) {
    if (slot.object != nullptr) result.objects.push_back(slot.object);
  }
  result.resource_version = resource_version_;
  return result;
}

KeysResult ThreadSafeStore::ListKeys() const {
  KeysResult result;
  MutexLock lock(&mu_);
  result.keys.reserve(keys_.size());
  for (const Slot& slot : slots_) {
    if (slot.object != nullptr) result.keys.emplace_back(slot.object->key());
  }
  result.resource_version = resource_version_;
  return result;
}

ListResult ThreadSafeStore::ListNamespace(absl::string_view namespace_name) const {
  ListResult result;
  MutexLock lock(&mu_);
  if (const auto* slots = SlotsWithValue(indexes_[0], namespace_name)) {
    result.objects.reserve(slots->size());
    for (SlotId id : *slots) result.objects.push_back(slots_[id].object);
  }
  result.resource_version = resource_version_;
  return result;
}

const ThreadSafeStore::IndexData* ThreadSafeStore::FindIndexLocked(absl::string_view name) const {
  for (const IndexData& index : indexes_) {
    if (index.function->name() == name) return &index;
  }
  return nullptr;
}

const absl::flat_hash_set<ThreadSafeStore::SlotId>* ThreadSafeStore::SlotsWithValue(
    const IndexData& index, absl::string_view value) {
  auto it = index.values.find(value);
  return it == index.values.end() ? nullptr : &it->second;
}

namespace {
absl::Status UnknownIndex(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("index with name \"", name, "\" does not exist"));
}
}  // namespace

absl::StatusOr<ListResult> ThreadSafeStore::Index(absl::string_view index_name,
                                                  const client::Object& object) const {
  ListResult result;
  MutexLock lock(&mu_);
  const IndexData* index = FindIndexLocked(index_name);
  if (index == nullptr) return UnknownIndex(index_name);
  // Values of `object` (a caller's object, possibly not in the store).
  std::vector<std::string> values;
  index->function->Values(object, [&](absl::string_view v) {
    if (std::find(values.begin(), values.end(), v) == values.end()) values.emplace_back(v);
  });
  if (values.size() == 1) {
    if (const auto* slots = SlotsWithValue(*index, values[0])) {
      for (SlotId id : *slots) result.objects.push_back(slots_[id].object);
    }
  } else {
    absl::flat_hash_set<SlotId> seen;
    for (const std::string& value : values) {
      if (const auto* slots = SlotsWithValue(*index, value)) {
        for (SlotId id : *slots) {
          if (seen.insert(id).second) result.objects.push_back(slots_[id].object);
        }
      }
    }
  }
  result.resource_version = resource_version_;
  return result;
}

absl::StatusOr<ListResult> ThreadSafeStore::ByIndex(absl::string_view index_name,
                                                    absl::string_view value) const {
  ListResult result;
  MutexLock lock(&mu_);
  const IndexData* index = FindIndexLocked(index_name);
  if (index == nullptr) return UnknownIndex(index_name);
  if (const auto* slots = SlotsWithValue(*index, value)) {
    result.objects.reserve(slots->size());
    for (SlotId id : *slots) result.objects.push_back(slots_[id].object);
  }
  result.resource_version = resource_version_;
  return result;
}

absl::StatusOr<KeysResult> ThreadSafeStore::IndexKeys(absl::string_view index_name,
                                                      absl::string_view value) const {
  KeysResult result;
  MutexLock lock(&mu_);
  const IndexData* index = FindIndexLocked(index_name);
  if (index == nullptr) return UnknownIndex(index_name);
  if (const auto* slots = SlotsWithValue(*index, value)) {
    result.keys.reserve(slots->size());
    for (SlotId id : *slots) result.keys.emplace_back(slots_[id].object->key());
  }
  result.resource_version = resource_version_;
  return result;
}

absl::StatusOr<ValuesResult> ThreadSafeStore::ListIndexFuncValues(
    absl::string_view index_name) const {
  ValuesResult result;
  MutexLock lock(&mu_);
  const IndexData* index = FindIndexLocked(index_name);
  if (index == nullptr) return UnknownIndex(index_name);
  result.values.reserve(index->values.size());
  for (const auto& [value, slots] : index->values) result.values.push_back(value);
  result.resource_version = resource_version_;
  return result;
}

std::vector<std::string> ThreadSafeStore::IndexNames() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const IndexData& index : indexes_) names.push_back(index.function->name());
  return names;
}

absl::Status ThreadSafeStore::AddIndexers(std::vector<IndexSpec> indexers) {
  MutexLock lock(&mu_);
  return AddIndexersLocked(std::move(indexers));
}

absl::Status ThreadSafeStore::AddIndexersLocked(std::vector<IndexSpec> indexers) {
  // Validate everything first, so that a failure adds nothing.
  std::vector<IndexData> added;
  for (IndexSpec& spec : indexers) {
    const std::string name = spec.name;
    bool taken = FindIndexLocked(name) != nullptr;
    for (const IndexData& other : added) taken = taken || other.function->name() == name;
    if (taken) {
      return absl::AlreadyExistsError(absl::StrCat("indexer conflict: \"", name, "\""));
    }
    absl::StatusOr<std::unique_ptr<IndexFunction>> function =
        IndexFunction::Create(std::move(spec));
    if (!function.ok()) return function.status();
    IndexData data;
    data.function = *std::move(function);
    added.push_back(std::move(data));
  }
  for (IndexData& data : added) {
    for (SlotId id = 0; id < slots_.size(); ++id) {
      if (slots_[id].object != nullptr) ReindexOneLocked(data, id, nullptr, slots_[id].object.get());
    }
    indexes_.push_back(std::move(data));
  }
  return absl::OkStatus();
}

size_t ThreadSafeStore::Size() const {
  MutexLock lock(&mu_);
  return keys_.size();
}

std::string ThreadSafeStore::ResourceVersion() const {
  MutexLock lock(&mu_);
  return resource_version_;
}

MemoryUsage ThreadSafeStore::memory() const {
  MutexLock lock(&mu_);
  MemoryUsage usage;
  usage.objects = keys_.size();
  size_t bytes = object_bytes_;
  bytes += slots_.capacity() * sizeof(Slot);
  bytes += keys_.capacity() * (sizeof(SlotId) + 1);
  for (const IndexData& index : indexes_) {
    using Value = std::pair<const std::string, absl::flat_hash_set<SlotId>>;
    bytes += index.values.capacity() * (sizeof(Value) + 1);
    for (const auto& [value, slots] : index.values) {
      if (value.capacity() > 15) bytes += value.capacity() + 1 + kMallocOverhead;
      if (slots.capacity() > 0) {
        bytes += slots.capacity() * (sizeof(SlotId) + 1) + kMallocOverhead;
      }
    }
  }
  usage.bytes = bytes;
  return usage;
}

void ThreadSafeStore::ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const {
  MutexLock lock(&mu_);
  for (const Slot& slot : slots_) {
    if (slot.object != nullptr) fn(slot.object);
  }
}

}  // namespace informerd::informer
