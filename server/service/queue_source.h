// Queue sources: informer bindings evaluated in the server. A QueueSource (queues.proto) becomes
// a SourceMapper — which updates matter (predicates) and which keys an object maps to (its own,
// its owner's, or the keys another informer's index holds for it) — and a SourceBinding that
// feeds the informer's events through the mapper into a queue.
//
//   SourcePump pump;                                   // one per QueueRegistry
//   auto mapper = SourceMapper::Create(spec.sources(0), "spec.sources[0]", lookups).value();
//   auto binding = pump.Bind(mapper, sink, "queue:pods").value();   // unbinds when destroyed
//
// Bindings have no thread of their own: each is a Pop/Done listener on its informer, and the
// pump's one thread takes notifications from whichever listener has some (a bounded batch per
// turn, round robin), as a Watch subscriber is fed. So per binding, events are mapped in the
// order the cache changed; a slow binding delays only the pump; and a binding that falls behind
// its buffer re-snapshots (the net change of each key), which for keys is the same work.
//
// Mapping rules:
//   * an add or delete always maps; an update maps when any predicate passes (none: always),
//     and maps both the new and the old object (an object that left the selector, or changed
//     owner, needs a look under the old mapping too; the queue deduplicates);
//   * the label selector applies to every object mapped;
//   * keys carry their cluster (queue_spec.h): keys of another cluster than the default are
//     "<cluster>//<key>".
//
// Thread safety: a SourceMapper is immutable; SourcePump and SourceBinding methods may be called
// from any thread.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_SOURCE_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "client/object.h"
#include "informerd/v1/queues.pb.h"
#include "server/informer/field_path.h"
#include "server/informer/label_selector.h"
#include "server/informer/shared_informer.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::service {

// What a source needs to know of an informer.
struct SourceInformer {
  std::shared_ptr<informer::SharedInformer> informer;
  // Its cluster as keys name it: "" for the daemon's default cluster, else the cluster's name.
  std::string cluster;
};

struct SourceLookups {
  // The informer with this id; nullopt when there is none.
  std::function<std::optional<SourceInformer>(absl::string_view id)> informer;
  // Whether kind `kind` of API group `group` (nullopt: any group) is namespaced in `cluster`
  // (as SourceInformer::cluster names it), through discovery; NOT_FOUND when the cluster serves
  // no such kind. Unset: every owner kind is taken as namespaced.
  std::function<absl::StatusOr<bool>(absl::string_view cluster,
                                     const std::optional<std::string>& group,
                                     absl::string_view kind)>
      kind_namespaced;
};

// Makes one add with `add()` (returning absl::Status) and counts it in `adds`. The count comes
// first: once the key is in the queue a worker may already hold it, and whoever saw it delivered
// must find it counted. An add the queue refuses is uncounted again. Returns whether it was added.
template <typename AddFn>
bool CountedAdd(std::atomic<uint64_t>& adds, AddFn add) {
  adds.fetch_add(1, std::memory_order_relaxed);
  if (add().ok()) return true;
  adds.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

// Where mapped keys go: a queue, counting its adds.
struct KeySink {
  std::shared_ptr<workqueue::RateLimitingQueue> queue;
  std::shared_ptr<std::atomic<uint64_t>> adds;
  // Adds `key` at `priority`, marked as from an informer's initial list or not (invalid keys,
  // e.g. longer than kMaxKeyBytes, are dropped).
  void Enqueue(absl::string_view key, int32_t priority = workqueue::kDefaultPriority,
               bool initial_list = false) const;
};

// Why a source adds a key, which decides its priority (QueueSource.priorities).
enum class AddCause {
  kChanged,      // a create, a delete, an update that changed the object
  kInitialList,  // the informer's initial list (or the replay to a new binding)
  kUnchanged,    // the queue's resync, an update with the old resourceVersion
};

class SourceMapper {
 public:
  // Resolves the source's informers (NOT_FOUND "<field>.informer_id: ...") and, for owner
  // sources, the owner kind's scope. The source's shape must have passed NormalizeQueueSpec.
  static absl::StatusOr<std::shared_ptr<const SourceMapper>> Create(const v1::QueueSource& source,
                                                                    const std::string& field,
                                                                    const SourceLookups& lookups);

  const std::shared_ptr<informer::SharedInformer>& informer() const { return informer_; }
  // Whether an update from `old_object` to `new_object` passes the predicates.
  bool Passes(const client::Object& old_object, const client::Object& new_object) const;
  // Emits the keys `object` maps to (none when it does not match the label selector).
  void Map(const client::Object& object, absl::FunctionRef<void(absl::string_view)> emit) const;
  // The priority of an add for `cause` (QueueSource.priorities).
  int32_t Priority(AddCause cause) const { return priorities_[static_cast<int>(cause)]; }

 private:
  enum class Kind { kObject, kOwner, kIndex };
  struct Predicates {
    bool generation = false;
    bool labels = false;
    bool annotations = false;
    std::vector<informer::FieldPath> fields;
    bool any() const { return generation || labels || annotations || !fields.empty(); }
  };
  SourceMapper() = default;

  std::shared_ptr<informer::SharedInformer> informer_;
  std::string cluster_;  // of informer_
  informer::LabelSelector selector_;
  Predicates predicates_;
  Kind kind_ = Kind::kObject;
  // By AddCause.
  int32_t priorities_[3] = {workqueue::kDefaultPriority, workqueue::kDefaultPriority,
                            workqueue::kDefaultPriority};
  // kOwner:
  std::string owner_kind_;
  std::optional<std::string> owner_group_;
  bool all_owners_ = false;
  bool owner_namespaced_ = true;
  // kIndex (weak: a binding never keeps another informer alive):
  std::weak_ptr<informer::SharedInformer> index_informer_;
  std::string index_cluster_;
  std::string index_name_;
  v1::IndexLookup::ValueFrom value_from_ = v1::IndexLookup::KEY;
};

class SourcePump;

// One source bound to one queue. Destroying it unbinds: no key is mapped through it after the
// destructor returns.
class SourceBinding {
 public:
  ~SourceBinding();
  SourceBinding(const SourceBinding&) = delete;
  SourceBinding& operator=(const SourceBinding&) = delete;

  const SourceMapper& mapper() const { return *state_->mapper; }
  const std::shared_ptr<const SourceMapper>& mapper_ptr() const { return state_->mapper; }
  const KeySink& sink() const { return state_->sink; }

 private:
  friend class SourcePump;
  struct State {
    std::shared_ptr<const SourceMapper> mapper;
    KeySink sink;
    std::shared_ptr<informer::ProcessorListener> listener;
    bool queued = false;  // in the pump's ready list; guarded by the pump's mu_
  };
  SourceBinding(SourcePump* pump, std::shared_ptr<State> state)
      : pump_(pump), state_(std::move(state)) {}
  SourcePump* const pump_;
  const std::shared_ptr<State> state_;
};

class SourcePump {
 public:
  SourcePump();
  ~SourcePump();  // REQUIRES: every binding is destroyed first.
  SourcePump(const SourcePump&) = delete;
  SourcePump& operator=(const SourcePump&) = delete;

  // Registers a listener on the mapper's informer that feeds `sink`. The listener first gets the
  // informer's current objects (so a new binding enqueues every object it maps once).
  absl::StatusOr<std::unique_ptr<SourceBinding>> Bind(std::shared_ptr<const SourceMapper> mapper,
                                                      KeySink sink, std::string name);

 private:
  friend class SourceBinding;
  using State = SourceBinding::State;
  void MarkReady(const std::shared_ptr<State>& state);
  void Unbind(const std::shared_ptr<State>& state);
  void Run();
  // Handles up to one batch of `state`'s notifications; true when more may be waiting.
  bool Drain(State& state);

  Mutex mu_;
  std::deque<std::shared_ptr<State>> ready_ ABSL_GUARDED_BY(mu_);
  State* running_ ABSL_GUARDED_BY(mu_) = nullptr;  // the binding the pump thread is mapping
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_SOURCE_H_
