#include "base/log.h"
#include "client/api_error.h"
#include "server/informer/thread_safe_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace informerd::informer {
namespace {

// glibc malloc's per-chunk header, counted once per allocation.
constexpr size_t kMallocOverhead = 16;

}  // namespace

size_t ApproximateObjectBytes(const client::Object& object) {
  // The Object, its control block and all its bytes are one allocation.
  return object.allocated_bytes();
}

// ---- compression ----

ThreadSafeStore::Stored ThreadSafeStore::Pack(
    ObjectPtr object, const std::shared_ptr<const ZstdDictionary>& dictionary) const {
  std::string frame = ZstdCompress(object->json(), dictionary.get());
  if (frame.empty() || frame.size() + kMinSaving > object->json().size()) {
    return {std::move(object), nullptr};  // too small to gain
  }
  absl::StatusOr<ObjectPtr> shell = shell_->Apply(object);
  if (!shell.ok()) return {std::move(object), nullptr};
  auto packed = std::make_shared<Packed>();
  packed->frame = std::move(frame);
  packed->dictionary = dictionary;
  // The shell and the frame must together be smaller than the object, or it stays plain.
  if ((*shell)->allocated_bytes() + PackedBytes(*packed) >= object->allocated_bytes()) {
    return {std::move(object), nullptr};
  }
  return {*std::move(shell), std::move(packed)};
}

ObjectPtr ThreadSafeStore::Unpack(const Stored& stored) {
  if (stored.packed == nullptr) return stored.object;
  absl::StatusOr<std::string> json =
      ZstdDecompress(stored.packed->frame, stored.packed->dictionary.get());
  absl::StatusOr<ObjectPtr> object =
      json.ok() ? client::Object::Parse(*json) : absl::StatusOr<ObjectPtr>(json.status());
  if (!object.ok()) {
    LogWithFields(spdlog::level::err,
                  {{"key", stored.object->key()}, {"error", client::DescribeStatus(object.status())}},
                  "store: cannot decompress an object");
    return nullptr;
  }
  return *std::move(object);
}

void ThreadSafeStore::UnpackAll(std::vector<ObjectPtr>& objects,
                                std::vector<std::pair<size_t, PackedPtr>>& packed) {
  if (packed.empty()) return;
  bool failed = false;
  for (auto& [i, p] : packed) {
    objects[i] = Unpack({objects[i], std::move(p)});
    failed = failed || objects[i] == nullptr;
  }
  packed.clear();
  if (failed) objects.erase(std::remove(objects.begin(), objects.end(), nullptr), objects.end());
}

size_t ThreadSafeStore::PackedBytes(const Packed& packed) {
  // make_shared's one allocation (control block and Packed) and the frame's buffer.
  return sizeof(Packed) + 16 + kMallocOverhead + packed.frame.capacity() + 1 + kMallocOverhead;
}

size_t ThreadSafeStore::SlotBytesLocked(const Slot& slot) const {
  size_t bytes = ApproximateObjectBytes(*slot.object);
  if (slot.packed != nullptr) bytes += PackedBytes(*slot.packed);
  return bytes;
}

void ThreadSafeStore::CollectLocked(SlotId id, std::vector<ObjectPtr>& objects,
                                    std::vector<std::pair<size_t, PackedPtr>>& packed) const {
  const Slot& slot = slots_[id];
  if (slot.packed != nullptr) packed.emplace_back(objects.size(), slot.packed);
  objects.push_back(slot.object);
}

ObjectPtr ThreadSafeStore::IndexedLocked(const Slot& slot) const {
  if (slot.packed == nullptr || !content_indexes_) return slot.object;
  ObjectPtr whole = Unpack({slot.object, slot.packed});
  // On a failure the shell still gives the metadata indexes' values.
  return whole != nullptr ? whole : slot.object;
}

void ThreadSafeStore::MaybeTrain(bool drained) {
  if (shell_ == nullptr) return;
  std::vector<ObjectPtr> samples;
  {
    MutexLock lock(&mu_);
    if (trained_ || training_) return;
    if (plain_bytes_ < (drained ? kMinTrainBytes : kTrainBytes)) return;
    training_ = true;  // a second writer thread, if any, does not train again meanwhile
    // Every object stored so far, up to about twice kTrainBytes of them, spread over the slots.
    const size_t step = std::max<size_t>(1, plain_bytes_ / (2 * kTrainBytes));
    size_t i = 0;
    for (const Slot& slot : slots_) {
      if (slot.object != nullptr && slot.packed == nullptr && i++ % step == 0) {
        samples.push_back(slot.object);
      }
    }
  }
  std::vector<absl::string_view> views;
  views.reserve(samples.size());
  for (const ObjectPtr& o : samples) views.push_back(o->json());
  absl::StatusOr<std::shared_ptr<const ZstdDictionary>> trained = ZstdDictionary::Train(views);
  samples.clear();
  std::shared_ptr<const ZstdDictionary> dictionary;
  if (trained.ok()) {
    dictionary = *std::move(trained);
  } else {
    spdlog::warn("store: compressing without a dictionary: {}",
                 client::DescribeStatus(trained.status()));
  }
  {
    MutexLock lock(&mu_);
    trained_ = true;
    training_ = false;
    dictionary_ = dictionary;
    plain_bytes_ = 0;
  }
  // Compress what was stored plain, a batch at a time, compressing outside the lock. The store has
  // one writer (the informer's thread, which is this one), so a slot still holding the object it
  // held when the batch was taken is the one to replace.
  constexpr size_t kBatch = 256;
  SlotId next = 0;
  std::vector<std::pair<SlotId, ObjectPtr>> batch;
  std::vector<Stored> packed;
  while (true) {
    batch.clear();
    {
      MutexLock lock(&mu_);
      for (; next < slots_.size() && batch.size() < kBatch; ++next) {
        const Slot& slot = slots_[next];
        if (slot.object != nullptr && slot.packed == nullptr) batch.emplace_back(next, slot.object);
      }
    }
    if (batch.empty()) break;
    packed.clear();
    for (const auto& [id, object] : batch) packed.push_back(Pack(object, dictionary));
    MutexLock lock(&mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      Slot& slot = slots_[batch[i].first];
      if (slot.object != batch[i].second || packed[i].packed == nullptr) continue;
      // Same key, same index values: only the bytes change.
      object_bytes_ -= SlotBytesLocked(slot);
      slot.object = std::move(packed[i].object);
      slot.packed = std::move(packed[i].packed);
      object_bytes_ += SlotBytesLocked(slot);
    }
  }
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
  if (options.compression == StoreCompression::kZstd) {
    // The shell: what the key index, the namespace, label and owner indexes and label selectors
    // read. Annotations are left out: they are often the largest part of metadata
    // (last-applied-configuration) and nothing the store does reads them.
    store->shell_ = Transform::Create({.strip_managed_fields = true,
                                       .drop_paths = {"metadata.annotations"},
                                       .metadata_only = true})
                        .value();
  }
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

ThreadSafeStore::Stored ThreadSafeStore::UpdateLocked(ObjectPtr object, Stored stored,
                                                      uint32_t epoch) {
  if (stored.object == nullptr) stored.object = object;
  const absl::string_view key = object->key();
  const HashedKey hashed{key, Hash32(key)};
  auto it = keys_.find(hashed);
  if (it != keys_.end()) {
    const SlotId id = *it;
    Slot& slot = slots_[id];
    slot.epoch = epoch;
    if (slot.object == object) return {slot.object, nullptr};  // the very object: nothing changes
    if (slot.packed != nullptr && slot.object->resource_version() == object->resource_version() &&
        slot.object->uid() == object->uid()) {
      return {std::move(object), nullptr};  // the same version: keep the frame
    }
    ObjectPtr indexed = IndexedLocked(slot);
    ReindexLocked(id, indexed.get(), object.get());
    object_bytes_ -= SlotBytesLocked(slot);
    if (!trained_ && slot.packed == nullptr) plain_bytes_ -= slot.object->json().size();
    // The key index compares against the slot's key, which is the same string in both objects.
    Stored previous{std::move(slot.object), std::move(slot.packed)};
    // Decompressed for a field index already: the caller need not do it again.
    if (previous.packed != nullptr && indexed != previous.object) {
      previous = {std::move(indexed), nullptr};
    }
    slot.object = std::move(stored.object);
    slot.packed = std::move(stored.packed);
    object_bytes_ += SlotBytesLocked(slot);
    if (!trained_ && slot.packed == nullptr) plain_bytes_ += slot.object->json().size();
    return previous;
  }
  const SlotId id = NewSlotLocked();
  Slot& slot = slots_[id];
  slot.object = std::move(stored.object);
  slot.packed = std::move(stored.packed);
  slot.hash32 = hashed.hash32;
  slot.epoch = epoch;
  keys_.insert(id);
  object_bytes_ += SlotBytesLocked(slot);
  if (!trained_ && slot.packed == nullptr) plain_bytes_ += slot.object->json().size();
  ReindexLocked(id, nullptr, object.get());
  return {};
}

ThreadSafeStore::Stored ThreadSafeStore::RemoveSlotLocked(SlotId id) {
  Slot& slot = slots_[id];
  ObjectPtr indexed = IndexedLocked(slot);
  ReindexLocked(id, indexed.get(), nullptr);
  keys_.erase(id);  // before the slot is freed: the key index reads its hash32
  object_bytes_ -= SlotBytesLocked(slot);
  if (!trained_ && slot.packed == nullptr) plain_bytes_ -= slot.object->json().size();
  Stored removed{std::move(slot.object), std::move(slot.packed)};
  if (removed.packed != nullptr && indexed != removed.object) removed = {std::move(indexed), nullptr};
  slot.object = nullptr;
  slot.packed = nullptr;
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
  if (shell_ == nullptr) {
    MutexLock lock(&mu_);
    return UpdateLocked(std::move(object), {}, epoch_).object;
  }
  // Compression: the frame is made outside the lock, unless the object is stored already.
  std::shared_ptr<const ZstdDictionary> dictionary;
  bool trained;
  {
    MutexLock lock(&mu_);
    if (const SlotId id = FindLocked(object->key()); id != ~SlotId{0}) {
      const Slot& slot = slots_[id];
      if (slot.object == object ||
          (slot.packed != nullptr && slot.object->resource_version() == object->resource_version() &&
           slot.object->uid() == object->uid())) {
        return UpdateLocked(std::move(object), {}, epoch_).object;
      }
    }
    trained = trained_;
    dictionary = dictionary_;
  }
  Stored stored = trained ? Pack(object, dictionary) : Stored{};
  Stored previous;
  {
    MutexLock lock(&mu_);
    previous = UpdateLocked(std::move(object), std::move(stored), epoch_);
  }
  if (!trained) MaybeTrain(/*drained=*/false);
  return Unpack(previous);
}

ObjectPtr ThreadSafeStore::Delete(absl::string_view key) {
  Stored removed;
  {
    MutexLock lock(&mu_);
    const SlotId id = FindLocked(key);
    if (id == ~SlotId{0}) return nullptr;
    removed = RemoveSlotLocked(id);
  }
  return Unpack(removed);
}

void ThreadSafeStore::Replace(std::vector<ObjectPtr> objects, std::string resource_version) {
  {
    std::vector<Stored> removed;  // released after the lock
    // Compression: the frames are made before the lock is taken (with the dictionary, if any).
    std::vector<Stored> stored(objects.size());
    if (shell_ != nullptr) {
      std::shared_ptr<const ZstdDictionary> dictionary;
      bool trained;
      {
        MutexLock lock(&mu_);
        trained = trained_;
        dictionary = dictionary_;
      }
      if (trained) {
        for (size_t i = 0; i < objects.size(); ++i) stored[i] = Pack(objects[i], dictionary);
      }
    }
    MutexLock lock(&mu_);
    const uint32_t epoch = ++epoch_;
    for (size_t i = 0; i < objects.size(); ++i) {
      Stored previous = UpdateLocked(std::move(objects[i]), std::move(stored[i]), epoch);
      if (previous.object != nullptr) removed.push_back(std::move(previous));
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
  MaybeTrain(/*drained=*/true);
}

void ThreadSafeStore::SetResourceVersion(std::string resource_version) {
  {
    MutexLock lock(&mu_);
    resource_version_ = std::move(resource_version);
  }
  MaybeTrain(/*drained=*/true);
}

// ---- reads ----

GetResult ThreadSafeStore::Get(absl::string_view key) const {
  GetResult result;
  Stored stored;
  {
    MutexLock lock(&mu_);
    const SlotId id = FindLocked(key);
    if (id != ~SlotId{0}) stored = {slots_[id].object, slots_[id].packed};
    result.resource_version = resource_version_;
  }
  result.object = Unpack(stored);
  return result;
}

ListResult ThreadSafeStore::List() const {
  ListResult result;
  std::vector<std::pair<size_t, PackedPtr>> packed;
  {
    MutexLock lock(&mu_);
    result.objects.reserve(keys_.size());
    for (SlotId id = 0; id < slots_.size(); ++id) {
      if (slots_[id].object != nullptr) CollectLocked(id, result.objects, packed);
    }
    result.resource_version = resource_version_;
  }
  UnpackAll(result.objects, packed);
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
  std::vector<std::pair<size_t, PackedPtr>> packed;
  {
    MutexLock lock(&mu_);
    if (const auto* slots = SlotsWithValue(indexes_[0], namespace_name)) {
      result.objects.reserve(slots->size());
      for (SlotId id : *slots) CollectLocked(id, result.objects, packed);
    }
    result.resource_version = resource_version_;
  }
  UnpackAll(result.objects, packed);
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
  std::vector<std::pair<size_t, PackedPtr>> packed;
  {
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
        for (SlotId id : *slots) CollectLocked(id, result.objects, packed);
      }
    } else {
      absl::flat_hash_set<SlotId> seen;
      for (const std::string& value : values) {
        if (const auto* slots = SlotsWithValue(*index, value)) {
          for (SlotId id : *slots) {
            if (seen.insert(id).second) CollectLocked(id, result.objects, packed);
          }
        }
      }
    }
    result.resource_version = resource_version_;
  }
  UnpackAll(result.objects, packed);
  return result;
}

absl::StatusOr<ListResult> ThreadSafeStore::ByIndex(absl::string_view index_name,
                                                    absl::string_view value) const {
  ListResult result;
  std::vector<std::pair<size_t, PackedPtr>> packed;
  {
    MutexLock lock(&mu_);
    const IndexData* index = FindIndexLocked(index_name);
    if (index == nullptr) return UnknownIndex(index_name);
    if (const auto* slots = SlotsWithValue(*index, value)) {
      result.objects.reserve(slots->size());
      for (SlotId id : *slots) CollectLocked(id, result.objects, packed);
    }
    result.resource_version = resource_version_;
  }
  UnpackAll(result.objects, packed);
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
    const IndexSpec::Kind kind = data.function->spec().kind;
    content_indexes_ =
        content_indexes_ || kind == IndexSpec::Kind::kField || kind == IndexSpec::Kind::kCustom;
    for (SlotId id = 0; id < slots_.size(); ++id) {
      if (slots_[id].object != nullptr) {
        ReindexOneLocked(data, id, nullptr, IndexedLocked(slots_[id]).get());
      }
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
  if (dictionary_ != nullptr) bytes += dictionary_->memory_bytes();
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
  if (shell_ == nullptr) {
    MutexLock lock(&mu_);
    for (const Slot& slot : slots_) {
      if (slot.object != nullptr) fn(slot.object);
    }
    return;
  }
  ListResult all = List();
  for (const ObjectPtr& object : all.objects) fn(object);
}

std::unique_ptr<ObjectSnapshot> ThreadSafeStore::Snapshot() const {
  // What a compressed store's snapshot holds: each object's shell and frame.
  class Packed : public ObjectSnapshot {
   public:
    explicit Packed(std::vector<Stored> stored) : stored_(std::move(stored)) {}
    size_t size() const override { return stored_.size(); }
    ObjectPtr Take(size_t i) override {
      Stored taken = std::move(stored_[i]);
      return Unpack(taken);
    }

   private:
    std::vector<Stored> stored_;
  };
  MutexLock lock(&mu_);
  if (shell_ == nullptr) {
    std::vector<ObjectPtr> objects;
    objects.reserve(keys_.size());
    for (const Slot& slot : slots_) {
      if (slot.object != nullptr) objects.push_back(slot.object);
    }
    return std::make_unique<VectorSnapshot>(std::move(objects));
  }
  std::vector<Stored> stored;
  stored.reserve(keys_.size());
  for (const Slot& slot : slots_) {
    if (slot.object != nullptr) stored.push_back({slot.object, slot.packed});
  }
  return std::make_unique<Packed>(std::move(stored));
}

void ThreadSafeStore::ForEachKey(absl::FunctionRef<void(absl::string_view)> fn) const {
  MutexLock lock(&mu_);
  for (const Slot& slot : slots_) {
    if (slot.object != nullptr) fn(slot.object->key());
  }
}

ObjectPtr ThreadSafeStore::GetUnchanged(const client::Object& object) const {
  MutexLock lock(&mu_);
  const SlotId id = FindLocked(object.key());
  if (id == ~SlotId{0}) return nullptr;
  const Slot& slot = slots_[id];
  if (slot.packed != nullptr || slot.object->resource_version() != object.resource_version() ||
      slot.object->uid() != object.uid()) {
    return nullptr;
  }
  return slot.object;
}

}  // namespace informerd::informer
