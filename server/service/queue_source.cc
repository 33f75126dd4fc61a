#include "server/service/queue_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/queue_spec.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

// Notifications a binding maps per turn before the pump moves on to the next binding.
constexpr size_t kBatch = 256;

// The API group of an apiVersion: "apps/v1" -> "apps", "v1" -> "".
absl::string_view GroupOf(absl::string_view api_version) {
  const size_t slash = api_version.find('/');
  return slash == absl::string_view::npos ? absl::string_view() : api_version.substr(0, slash);
}

template <typename T>
bool SameSpan(absl::Span<const T> a, absl::Span<const T> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const T& x, const T& y) {
    return x.key == y.key && x.value == y.value;
  });
}

bool SameValues(const informer::FieldPath& path, const client::Object& a, const client::Object& b) {
  std::vector<std::string> va, vb;
  path.Values(a, [&](absl::string_view v) { va.emplace_back(v); });
  path.Values(b, [&](absl::string_view v) { vb.emplace_back(v); });
  return va == vb;
}

}  // namespace

void KeySink::Enqueue(absl::string_view key, int32_t priority, bool initial_list) const {
  if (!InvalidKeyReason(key).empty()) return;
  CountedAdd(*adds, [&] { return queue->Add(key, priority, initial_list); });
}

// ---- SourceMapper ----

absl::StatusOr<std::shared_ptr<const SourceMapper>> SourceMapper::Create(
    const v1::QueueSource& src, const std::string& f, const SourceLookups& lookups) {
  std::shared_ptr<SourceMapper> m(new SourceMapper());
  std::optional<SourceInformer> inf = lookups.informer(src.informer_id());
  if (!inf.has_value() || inf->informer == nullptr) {
    const std::string field = f + ".informer_id";
    return Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND,
                 absl::StrCat(field, ": no such informer \"", src.informer_id(), "\""),
                 {{"field", field}, {"informer_id", src.informer_id()}});
  }
  m->informer_ = std::move(inf->informer);
  m->cluster_ = std::move(inf->cluster);
  if (src.has_priorities()) {
    const v1::SourcePriorities& p = src.priorities();
    const int32_t changed = p.has_changed() ? p.changed() : workqueue::kDefaultPriority;
    m->priorities_[static_cast<int>(AddCause::kChanged)] = changed;
    m->priorities_[static_cast<int>(AddCause::kInitialList)] =
        p.has_initial_list() ? p.initial_list() : changed;
    m->priorities_[static_cast<int>(AddCause::kUnchanged)] =
        p.has_unchanged() ? p.unchanged() : changed;
  }
  auto selector = informer::LabelSelector::Parse(src.label_selector());
  if (!selector.ok()) {
    return InvalidField(f + ".label_selector", selector.status().message());
  }
  m->selector_ = std::move(*selector);
  for (const v1::Predicate& p : src.predicates()) {
    switch (p.kind_case()) {
      case v1::Predicate::kGenerationChanged:
        m->predicates_.generation = true;
        break;
      case v1::Predicate::kLabelsChanged:
        m->predicates_.labels = true;
        break;
      case v1::Predicate::kAnnotationsChanged:
        m->predicates_.annotations = true;
        break;
      case v1::Predicate::kFieldsChanged:
        for (const std::string& path : p.fields_changed().field_paths()) {
          auto parsed = informer::FieldPath::Parse(path);
          if (!parsed.ok()) return parsed.status();  // NormalizeQueueSpec named it already
          m->predicates_.fields.push_back(std::move(*parsed));
        }
        break;
      case v1::Predicate::KIND_NOT_SET:
        break;
    }
  }
  switch (src.map_to_case()) {
    case v1::QueueSource::MAP_TO_NOT_SET:
    case v1::QueueSource::kObject:
      break;
    case v1::QueueSource::kOwner: {
      const v1::OwnerKey& owner = src.owner();
      m->kind_ = Kind::kOwner;
      m->owner_kind_ = owner.kind();
      if (owner.has_group()) m->owner_group_ = owner.group();
      m->all_owners_ = owner.all_owners();
      if (lookups.kind_namespaced) {
        absl::StatusOr<bool> namespaced =
            lookups.kind_namespaced(m->cluster_, m->owner_group_, owner.kind());
        if (!namespaced.ok()) {
          const std::string field = f + ".owner";
          if (namespaced.status().code() == absl::StatusCode::kNotFound) {
            return Error(absl::StatusCode::kNotFound, v1::RESOURCE_NOT_FOUND,
                         absl::StrCat(field, ": ", namespaced.status().message()),
                         {{"field", field}, {"kind", owner.kind()}});
          }
          return Prefixed(absl::StrCat(field, ": "), namespaced.status());
        }
        m->owner_namespaced_ = *namespaced;
      }
      break;
    }
    case v1::QueueSource::kIndex: {
      const v1::IndexLookup& ix = src.index();
      std::optional<SourceInformer> target = lookups.informer(ix.informer_id());
      if (!target.has_value() || target->informer == nullptr) {
        const std::string field = f + ".index.informer_id";
        return Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND,
                     absl::StrCat(field, ": no such informer \"", ix.informer_id(), "\""),
                     {{"field", field}, {"informer_id", ix.informer_id()}});
      }
      const std::vector<std::string> names = target->informer->store().IndexNames();
      if (std::find(names.begin(), names.end(), ix.index_name()) == names.end()) {
        return InvalidField(f + ".index.index_name",
                            absl::StrCat("informer ", ix.informer_id(), " has no index \"",
                                         ix.index_name(), "\""));
      }
      m->kind_ = Kind::kIndex;
      m->index_informer_ = target->informer;
      m->index_cluster_ = std::move(target->cluster);
      m->index_name_ = ix.index_name();
      m->value_from_ = ix.value_from();
      break;
    }
  }
  return std::shared_ptr<const SourceMapper>(std::move(m));
}

bool SourceMapper::Passes(const client::Object& old_object,
                          const client::Object& new_object) const {
  if (!predicates_.any()) return true;
  if (predicates_.generation) {
    // Without metadata.generation (0 on either side) every write counts: resourceVersion.
    if (old_object.generation() == 0 || new_object.generation() == 0) {
      if (old_object.resource_version() != new_object.resource_version()) return true;
    } else if (old_object.generation() != new_object.generation()) {
      return true;
    }
  }
  if (predicates_.labels && !SameSpan(old_object.labels(), new_object.labels())) return true;
  if (predicates_.annotations &&
      !SameSpan(old_object.annotations(), new_object.annotations())) {
    return true;
  }
  for (const informer::FieldPath& path : predicates_.fields) {
    if (!SameValues(path, old_object, new_object)) return true;
  }
  return false;
}

void SourceMapper::Map(const client::Object& object,
                       absl::FunctionRef<void(absl::string_view)> emit) const {
  if (!selector_.Matches(object)) return;
  switch (kind_) {
    case Kind::kObject:
      emit(QueueKey(cluster_, object.key()));
      return;
    case Kind::kOwner:
      for (const client::OwnerReference& ref : object.owner_references()) {
        if (!all_owners_ && !ref.controller) continue;
        if (ref.kind != owner_kind_) continue;
        if (owner_group_.has_value() && GroupOf(ref.api_version) != *owner_group_) continue;
        // A cluster-scoped object can only have cluster-scoped owners.
        if (!owner_namespaced_ || object.namespace_name().empty()) {
          emit(QueueKey(cluster_, ref.name));
        } else {
          emit(QueueKey(cluster_, absl::StrCat(object.namespace_name(), "/", ref.name)));
        }
      }
      return;
    case Kind::kIndex: {
      std::shared_ptr<informer::SharedInformer> target = index_informer_.lock();
      if (target == nullptr) return;
      absl::string_view value =
          value_from_ == v1::IndexLookup::NAME ? object.name() : object.key();
      auto found = target->store().ByIndex(index_name_, value);
      if (!found.ok()) return;
      for (const informer::ObjectPtr& o : found->objects) emit(QueueKey(index_cluster_, o->key()));
      return;
    }
  }
}

// ---- SourceBinding / SourcePump ----

SourceBinding::~SourceBinding() { pump_->Unbind(state_); }

SourcePump::SourcePump() : thread_([this] { Run(); }) {}

SourcePump::~SourcePump() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<std::unique_ptr<SourceBinding>> SourcePump::Bind(
    std::shared_ptr<const SourceMapper> mapper, KeySink sink, std::string name) {
  auto state = std::make_shared<State>();
  state->mapper = std::move(mapper);
  state->sink = std::move(sink);
  std::weak_ptr<State> weak = state;
  auto listener = state->mapper->informer()->AddListener(
      {.name = std::move(name), .on_ready = [this, weak] {
         if (std::shared_ptr<State> s = weak.lock()) MarkReady(s);
       }});
  if (!listener.ok()) return listener.status();
  state->listener = std::move(*listener);
  MarkReady(state);  // the initial objects: on_ready fires only after a Pop found nothing
  return std::unique_ptr<SourceBinding>(new SourceBinding(this, std::move(state)));
}

void SourcePump::MarkReady(const std::shared_ptr<State>& state) {
  MutexLock lock(&mu_);
  if (state->queued) return;
  state->queued = true;
  ready_.push_back(state);
}

void SourcePump::Unbind(const std::shared_ptr<State>& state) {
  // Stopped listeners pop nothing; then wait out a turn in progress, so no key is mapped through
  // this binding once we return.
  state->mapper->informer()->RemoveEventHandler(state->listener).IgnoreError();
  MutexLock lock(&mu_);
  mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != state.get(); });
  ready_.erase(std::remove(ready_.begin(), ready_.end(), state), ready_.end());
  state->queued = false;
}

void SourcePump::Run() {
  for (;;) {
    std::shared_ptr<State> state;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !ready_.empty();
      });
      if (stopping_) return;
      state = std::move(ready_.front());
      ready_.pop_front();
      state->queued = false;
      running_ = state.get();
    }
    const bool more = Drain(*state);
    MutexLock lock(&mu_);
    running_ = nullptr;
    // More waiting: back of the line (fair among bindings). Else the listener's on_ready will
    // mark it again when something arrives.
    if (more && !state->queued) {
      state->queued = true;
      ready_.push_back(std::move(state));
    }
  }
}

bool SourcePump::Drain(State& state) {
  const SourceMapper& mapper = *state.mapper;
  const KeySink& sink = state.sink;
  int32_t priority = mapper.Priority(AddCause::kChanged);
  bool initial_list = false;
  auto enqueue = [&sink, &priority, &initial_list](absl::string_view key) {
    sink.Enqueue(key, priority, initial_list);
  };
  // An update maps the new and the old object; the keys are enqueued once each (else a worker
  // fast enough to take the first Add before the second would get the key twice).
  std::vector<std::string> update_keys;
  auto collect = [&update_keys](absl::string_view key) { update_keys.emplace_back(key); };
  std::vector<informer::Notification> batch;
  size_t taken = 0;
  // Until a Pop finds nothing (which arms the listener's on_ready) or the turn is used up.
  while (taken < kBatch) {
    batch.clear();
    if (!state.listener->Pop(kBatch - taken, &batch, /*wait=*/false) || batch.empty()) {
      return false;
    }
    taken += batch.size();
    for (const informer::Notification& n : batch) {
      switch (n.type) {
        case informer::Notification::Type::kAdd:
        case informer::Notification::Type::kDelete:
          if (n.object == nullptr) break;
          initial_list = n.type == informer::Notification::Type::kAdd && n.is_in_initial_list;
          priority =
              mapper.Priority(initial_list ? AddCause::kInitialList : AddCause::kChanged);
          mapper.Map(*n.object, enqueue);
          break;
        case informer::Notification::Type::kUpdate: {
          if (n.object == nullptr) break;
          if (n.old_object != nullptr && !mapper.Passes(*n.old_object, *n.object)) break;
          update_keys.clear();
          mapper.Map(*n.object, collect);
          if (n.old_object != nullptr) mapper.Map(*n.old_object, collect);
          std::sort(update_keys.begin(), update_keys.end());
          update_keys.erase(std::unique(update_keys.begin(), update_keys.end()),
                            update_keys.end());
          // A relist of an object that did not change (client-go's resync) is "unchanged".
          const bool unchanged =
              n.old_object != nullptr &&
              n.old_object->resource_version() == n.object->resource_version();
          priority = mapper.Priority(unchanged ? AddCause::kUnchanged : AddCause::kChanged);
          for (const std::string& key : update_keys) sink.Enqueue(key, priority);
          break;
        }
        case informer::Notification::Type::kResnapshot:
          break;  // the net changes that follow are mapped like any other
      }
    }
    state.listener->Done(batch);
  }
  return true;
}

}  // namespace informerd::service
