#include "server/service/queue_registry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/informer/label_selector.h"

namespace informerd::service {
namespace {

using workqueue::Lease;
using workqueue::RateLimiter;

// Longest delay a spec may ask for: larger values would only overflow absl::Duration math in
// the limiters and mean "never" anyway.
constexpr int64_t kMaxDelayMs = int64_t{365} * 24 * 3600 * 1000;
// max_of may nest; bound it so a hostile spec cannot recurse deeply.
constexpr int kMaxLimiterDepth = 8;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

std::string InvalidNameReason(absl::string_view name) {
  if (name.empty()) return "required";
  if (name.size() > 253) return "at most 253 characters";
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = absl::ascii_islower(c) || absl::ascii_isdigit(c);
    const bool edge = i == 0 || i + 1 == name.size();
    if (!alnum && (edge || (c != '-' && c != '.'))) {
      return absl::StrCat("\"", name, "\" must match [a-z0-9]([-a-z0-9.]*[a-z0-9])?");
    }
  }
  return "";
}

absl::Status CheckDelay(absl::string_view field, int64_t ms, bool positive) {
  if (positive ? ms <= 0 : ms < 0) return Invalid(field, positive ? "must be > 0" : "must be >= 0");
  if (ms > kMaxDelayMs) return Invalid(field, absl::StrCat("must be at most ", kMaxDelayMs));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RateLimiter>> BuildLimiter(const v1::RateLimiterSpec& spec,
                                                          const std::string& field, int depth,
                                                          Clock* clock) {
  if (depth > kMaxLimiterDepth) return Invalid(field, "max_of nested too deeply");
  switch (spec.kind_case()) {
    case v1::RateLimiterSpec::KIND_NOT_SET:
    case v1::RateLimiterSpec::kDefaultController:
      return workqueue::DefaultControllerRateLimiter(clock);
    case v1::RateLimiterSpec::kExponential: {
      const auto& e = spec.exponential();
      const std::string f = field + ".exponential";
      if (auto s = CheckDelay(f + ".base_delay_ms", e.base_delay_ms(), true); !s.ok()) return s;
      if (auto s = CheckDelay(f + ".max_delay_ms", e.max_delay_ms(), true); !s.ok()) return s;
      if (e.max_delay_ms() < e.base_delay_ms()) {
        return Invalid(f + ".max_delay_ms", "must be >= base_delay_ms");
      }
      auto l = workqueue::ItemExponentialFailureRateLimiter::Create(
          absl::Milliseconds(e.base_delay_ms()), absl::Milliseconds(e.max_delay_ms()));
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kFastSlow: {
      const auto& fs = spec.fast_slow();
      const std::string f = field + ".fast_slow";
      if (auto s = CheckDelay(f + ".fast_delay_ms", fs.fast_delay_ms(), false); !s.ok()) return s;
      if (auto s = CheckDelay(f + ".slow_delay_ms", fs.slow_delay_ms(), false); !s.ok()) return s;
      if (fs.max_fast_attempts() < 0) return Invalid(f + ".max_fast_attempts", "must be >= 0");
      auto l = workqueue::ItemFastSlowRateLimiter::Create(absl::Milliseconds(fs.fast_delay_ms()),
                                                         absl::Milliseconds(fs.slow_delay_ms()),
                                                         fs.max_fast_attempts());
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kBucket: {
      const auto& b = spec.bucket();
      const std::string f = field + ".bucket";
      if (!(b.qps() > 0) || !std::isfinite(b.qps())) return Invalid(f + ".qps", "must be > 0");
      if (b.burst() < 1) return Invalid(f + ".burst", "must be >= 1");
      auto l = workqueue::BucketRateLimiter::Create(b.qps(), b.burst(), clock);
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kMaxOf: {
      const std::string f = field + ".max_of.limiters";
      if (spec.max_of().limiters().empty()) return Invalid(f, "at least one limiter required");
      std::vector<std::unique_ptr<RateLimiter>> limiters;
      for (int i = 0; i < spec.max_of().limiters_size(); ++i) {
        auto l = BuildLimiter(spec.max_of().limiters(i), absl::StrCat(f, "[", i, "]"), depth + 1,
                              clock);
        if (!l.ok()) return l.status();
        limiters.push_back(std::move(*l));
      }
      auto l = workqueue::MaxOfRateLimiter::Create(std::move(limiters));
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
  }
  return Invalid(field, "unknown rate limiter kind");
}

}  // namespace

std::string InvalidKeyReason(absl::string_view key) {
  if (key.empty()) return "must not be empty";
  if (key.size() > kMaxKeyBytes) {
    return absl::StrCat("is ", key.size(), " bytes, at most ", kMaxKeyBytes, " allowed");
  }
  return "";
}

// ---- sources ----

// How a source maps an event's object to keys. Shared by the handler (on the listener's thread)
// and the resync timer; holds no strong reference to anything that holds the handler, so an
// unregistered handler never keeps the informers alive.
struct Mapper {
  enum class Kind { kObject, kOwner, kIndex };
  Kind kind = Kind::kObject;
  std::string owner_kind;
  std::weak_ptr<informer::SharedInformer> index_informer;
  std::string index_name;
  v1::IndexLookup::ValueFrom value_from = v1::IndexLookup::KEY;
  informer::LabelSelector selector;
  std::shared_ptr<workqueue::RateLimitingQueue> queue;
  std::shared_ptr<std::atomic<uint64_t>> adds;

  void Enqueue(absl::string_view key) const {
    if (InvalidKeyReason(key).empty() && queue->Add(key).ok()) {
      adds->fetch_add(1, std::memory_order_relaxed);
    }
  }

  void Map(const informer::ObjectPtr& object) const {
    if (object == nullptr || !selector.Matches(*object)) return;
    switch (kind) {
      case Kind::kObject:
        Enqueue(object->key());
        return;
      case Kind::kOwner: {
        const client::OwnerReference* owner = object->controller_ref();
        if (owner == nullptr || owner->kind != owner_kind) return;
        Enqueue(object->namespace_name().empty()
                    ? std::string(owner->name)
                    : absl::StrCat(object->namespace_name(), "/", owner->name));
        return;
      }
      case Kind::kIndex: {
        std::shared_ptr<informer::SharedInformer> target = index_informer.lock();
        if (target == nullptr) return;
        absl::string_view value =
            value_from == v1::IndexLookup::NAME ? object->name() : object->key();
        auto found = target->store().ByIndex(index_name, value);
        if (!found.ok()) return;
        for (const informer::ObjectPtr& o : found->objects) Enqueue(o->key());
        return;
      }
    }
  }
};

class MappingHandler final : public informer::ResourceEventHandler {
 public:
  explicit MappingHandler(std::shared_ptr<const Mapper> mapper) : mapper_(std::move(mapper)) {}
  void OnAdd(const informer::ObjectPtr& object, bool) override { mapper_->Map(object); }
  // Both states: an object that left the selector, or changed owner, needs a look under the old
  // mapping too (the queue deduplicates).
  void OnUpdate(const informer::ObjectPtr& old_object,
                const informer::ObjectPtr& new_object) override {
    mapper_->Map(new_object);
    mapper_->Map(old_object);
  }
  void OnDelete(const informer::ObjectPtr& object, bool) override { mapper_->Map(object); }

 private:
  const std::shared_ptr<const Mapper> mapper_;
};

struct NamedQueue::Binding {
  std::shared_ptr<informer::SharedInformer> informer;
  std::shared_ptr<const Mapper> mapper;
  std::shared_ptr<informer::ProcessorListener> listener;  // set by Start
};

// ---- Worker ----

Worker::Worker(NamedQueue* queue, std::string stream_id, WorkerOptions options,
               std::shared_ptr<LeaseSink> sink)
    : queue_(queue),
      stream_id_(std::move(stream_id)),
      options_(std::move(options)),
      sink_(std::move(sink)) {}

Worker::~Worker() { Detach(); }

void Worker::Detach() {
  std::shared_ptr<LeaseSink> sink;
  {
    MutexLock lock(&queue_->mu_);
    queue_->DetachLocked(this);
    sink = std::move(sink_);
  }
  // `sink` may be the last reference to the stream that is detaching us: released here, outside
  // the lock.
}

std::vector<v1::Refusal> Worker::Apply(const v1::Outcomes& outcomes) {
  std::vector<v1::Refusal> refusals;
  auto refuse = [&](const v1::Outcome& o, absl::StatusCode code, std::string message) {
    v1::Refusal& r = refusals.emplace_back();
    r.set_key(o.key());
    r.set_token(o.token());
    r.set_code(static_cast<int32_t>(code));
    r.set_message(std::move(message));
  };
  std::shared_ptr<LeaseSink> close_sink;
  {
    MutexLock lock(&queue_->mu_);
    workqueue::RateLimitingQueue& q = *queue_->queue_;
    for (int i = 0; i < outcomes.outcomes_size(); ++i) {
      const v1::Outcome& o = outcomes.outcomes(i);
      if (!attached_) {
        refuse(o, absl::StatusCode::kFailedPrecondition, "this stream no longer holds any key");
        continue;
      }
      auto it = held_.find(o.key());
      if (it == held_.end()) {
        refuse(o, absl::StatusCode::kFailedPrecondition,
               absl::StrCat("key \"", absl::CEscape(o.key().substr(0, 128)),
                            "\" is not held by this stream"));
        continue;
      }
      if (it->second.token != o.token()) {
        refuse(o, absl::StatusCode::kFailedPrecondition,
               absl::StrCat("stale token ", o.token(), " for key \"", absl::CEscape(o.key()),
                            "\": this stream holds it with token ", it->second.token));
        continue;
      }
      switch (o.result()) {
        case v1::Outcome::SUCCESS:
          q.Forget(o.key());
          break;
        case v1::Outcome::RETRY:
          // Refused only after shutdown, when the key is dropped like any other.
          if (q.AddRateLimited(o.key()).ok()) queue_->retries_.fetch_add(1);
          break;
        case v1::Outcome::REQUEUE_AFTER:
          if (o.requeue_after_ms() < 0 || o.requeue_after_ms() > kMaxDelayMs) {
            refuse(o, absl::StatusCode::kInvalidArgument,
                   absl::StrCat("outcomes[", i, "].requeue_after_ms: must be in 0..",
                                kMaxDelayMs));
            continue;  // still held: the worker may send a valid outcome
          }
          if (q.AddAfter(o.key(), absl::Milliseconds(o.requeue_after_ms())).ok()) {
            queue_->retries_.fetch_add(1);
          }
          break;
        case v1::Outcome::DONE:
          break;
        default:
          refuse(o, absl::StatusCode::kInvalidArgument,
                 absl::StrCat("outcomes[", i, "].result: must be SUCCESS, RETRY, REQUEUE_AFTER or DONE"));
          continue;
      }
      q.Done(it->second).IgnoreError();  // the token matched: this ends the current hand-out
      held_.erase(it);
    }
    if (queue_->stopping_ && attached_ && held_.empty() && !close_sent_) {
      close_sent_ = true;
      close_sink = sink_;
    }
  }
  if (close_sink != nullptr) close_sink->Close(absl::OkStatus());
  return refusals;
}

// ---- NamedQueue ----

NamedQueue::NamedQueue(v1::QueueSpec spec, std::shared_ptr<workqueue::RateLimitingQueue> queue,
                       Clock* clock)
    : spec_(std::move(spec)),
      clock_(clock),
      queue_(std::move(queue)),
      adds_(std::make_shared<std::atomic<uint64_t>>(0)) {}

NamedQueue::~NamedQueue() { Close(absl::CancelledError(absl::StrCat("queue ", name(), " closed"))); }

absl::Status NamedQueue::Start(std::vector<std::unique_ptr<Binding>> bindings) {
  bindings_ = std::move(bindings);
  for (auto& b : bindings_) {
    auto listener = b->informer->AddEventHandler(std::make_shared<MappingHandler>(b->mapper),
                                                 {.name = absl::StrCat("queue:", name())});
    if (!listener.ok()) return listener.status();
    b->listener = std::move(*listener);
  }
  if (spec_.resync_period_ms() > 0 && !bindings_.empty()) {
    resync_timer_ = clock_->CreateTimer([this] { OnResync(); });
    resync_timer_->ArmAt(clock_->Now() + absl::Milliseconds(spec_.resync_period_ms()));
  }
  dispatcher_ = std::thread([this] { Dispatch(); });
  return absl::OkStatus();
}

void NamedQueue::OnResync() {
  for (auto& b : bindings_) {
    // Copy first: ForEach holds the store's lock, and an index lookup may read this very store.
    std::vector<informer::ObjectPtr> objects;
    b->informer->store().ForEach([&](const informer::ObjectPtr& o) { objects.push_back(o); });
    for (const auto& o : objects) b->mapper->Map(o);
  }
  resync_timer_->ArmAt(clock_->Now() + absl::Milliseconds(spec_.resync_period_ms()));
}

void NamedQueue::Close(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    stopping_ = true;
  }
  queue_->ShutDown();  // wakes the dispatcher out of GetBatch
  resync_timer_.reset();
  for (auto& b : bindings_) {
    if (b->listener != nullptr) b->informer->RemoveEventHandler(b->listener).IgnoreError();
  }
  bindings_.clear();
  if (dispatcher_.joinable()) dispatcher_.join();
  // Every worker is told, including those still holding keys: their outcomes no longer matter.
  CloseWorkers(status, /*idle_only=*/false);
}

void NamedQueue::CloseWorkers(const absl::Status& status, bool idle_only) {
  std::vector<std::shared_ptr<LeaseSink>> to_close;
  {
    MutexLock lock(&mu_);
    for (Worker* w : workers_) {
      if (w->close_sent_ || (idle_only && !w->held_.empty())) continue;
      w->close_sent_ = true;
      to_close.push_back(w->sink_);
    }
  }
  for (auto& sink : to_close) sink->Close(status);
}

void NamedQueue::ShutDown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  queue_->ShutDown();
  CloseWorkers(absl::OkStatus(), /*idle_only=*/true);
}

bool NamedQueue::ShutDownAndDrain(absl::Time deadline) {
  ShutDown();
  MutexLock lock(&mu_);
  // Every Done happens under mu_ (outcomes, detaches, the dispatcher's give-backs), so the
  // predicate is re-checked whenever the count can have dropped.
  return mu_.AwaitWithDeadline(
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return queue_->Processing() == 0; }, deadline);
}

bool NamedQueue::ShuttingDown() const { return queue_->ShuttingDown(); }

bool NamedQueue::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

absl::StatusOr<std::unique_ptr<Worker>> NamedQueue::Attach(WorkerOptions options,
                                                           std::shared_ptr<LeaseSink> sink) {
  if (options.max_batch == 0 || options.max_batch > options.max_in_flight) {
    options.max_batch = options.max_in_flight;
  }
  std::string id = absl::StrCat(name(), "/", next_stream_.fetch_add(1));
  MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError(absl::StrCat("queue ", name(), " is shut down"));
  }
  std::unique_ptr<Worker> worker(
      new Worker(this, std::move(id), std::move(options), std::move(sink)));
  workers_.push_back(worker.get());
  return worker;
}

void NamedQueue::DetachLocked(Worker* worker) {
  if (!worker->attached_) return;
  worker->attached_ = false;
  for (auto& [key, lease] : worker->held_) {
    // Add while still processing marks the key dirty; Done then puts it back in the FIFO. After
    // shutdown the Add is refused and the key dropped, as client-go drops it.
    queue_->Add(key).IgnoreError();
    queue_->Done(lease).IgnoreError();
  }
  worker->held_.clear();
  workers_.erase(std::find(workers_.begin(), workers_.end(), worker));
}

size_t NamedQueue::HeldByWorkers() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const Worker* w : workers_) n += w->held_.size();
  return n;
}

void NamedQueue::Dispatch() {
  std::vector<Lease> leases;
  for (;;) {
    size_t want = 0;
    {
      MutexLock lock(&mu_);
      auto credit = [](const Worker* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return w->held_.size() < w->options_.max_in_flight;
      };
      mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || std::any_of(workers_.begin(), workers_.end(), credit);
      });
      if (stopping_) return;
      // The most any one worker can take; the batch goes to whichever can take it when it
      // arrives (GetBatch may wait long, and workers come and go meanwhile).
      for (const Worker* w : workers_) {
        want = std::max<size_t>(want, std::min<size_t>(w->options_.max_in_flight - w->held_.size(),
                                                       w->options_.max_batch));
      }
    }
    leases.clear();
    if (queue_->GetBatch(want, &leases) == 0) return;  // shut down and empty
    std::vector<std::pair<std::shared_ptr<LeaseSink>, std::vector<Lease>>> deliveries;
    {
      MutexLock lock(&mu_);
      if (stopping_) {
        for (const Lease& l : leases) queue_->Done(l).IgnoreError();
        continue;  // and return at the top
      }
      // Round robin from next_worker_: each worker with credit takes what it can.
      size_t next = 0;
      const size_t n = workers_.size();
      const size_t start = n == 0 ? 0 : next_worker_ % n;
      for (size_t i = 0; i < n && next < leases.size(); ++i) {
        Worker* w = workers_[(start + i) % n];
        size_t take = std::min<size_t>({w->options_.max_in_flight - w->held_.size(),
                                        w->options_.max_batch, leases.size() - next});
        if (take == 0) continue;
        std::vector<Lease> batch(leases.begin() + next, leases.begin() + next + take);
        next += take;
        for (const Lease& l : batch) w->held_.emplace(l.key, l);
        deliveries.emplace_back(w->sink_, std::move(batch));
        next_worker_ = (start + i + 1) % n;
      }
      // Nobody could take the rest (workers left meanwhile): back into the queue.
      for (; next < leases.size(); ++next) {
        queue_->Add(leases[next].key).IgnoreError();
        queue_->Done(leases[next]).IgnoreError();
      }
    }
    // Outside the lock: a sink may call back (its stream ending detaches its worker). A worker
    // detached meanwhile has already given these keys back; its sink drops them.
    for (auto& [sink, batch] : deliveries) sink->Deliver(std::move(batch));
    deliveries.clear();
  }
}

v1::QueueState NamedQueue::State() const {
  v1::QueueState s;
  s.set_depth(queue_->Len());
  s.set_in_flight(queue_->Processing());
  s.set_delayed(queue_->Waiting());
  {
    MutexLock lock(&mu_);
    s.set_workers(workers_.size());
  }
  s.set_adds(adds_->load(std::memory_order_relaxed));
  s.set_retries(retries_.load(std::memory_order_relaxed));
  s.set_shutting_down(queue_->ShuttingDown());
  return s;
}

std::vector<WorkerInfo> NamedQueue::Workers() const {
  MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const Worker* w : workers_) {
    out.push_back({.stream_id = w->stream_id_,
                   .peer = w->options_.peer,
                   .name = w->options_.name,
                   .max_in_flight = w->options_.max_in_flight,
                   .in_flight = w->held_.size()});
  }
  return out;
}

namespace {
absl::Status ShutDownError(absl::string_view name) {
  return absl::FailedPreconditionError(absl::StrCat("queue ", name, " is shut down"));
}
}  // namespace

absl::Status NamedQueue::Add(const Keys& keys) {
  for (const std::string& key : keys) {
    if (!queue_->Add(key).ok()) return ShutDownError(name());
    adds_->fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status NamedQueue::AddAfter(const Keys& keys, absl::Duration delay) {
  for (const std::string& key : keys) {
    if (!queue_->AddAfter(key, delay).ok()) return ShutDownError(name());
    if (delay > absl::ZeroDuration()) retries_.fetch_add(1, std::memory_order_relaxed);
    adds_->fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status NamedQueue::AddRateLimited(const Keys& keys) {
  for (const std::string& key : keys) {
    if (!queue_->AddRateLimited(key).ok()) return ShutDownError(name());
    retries_.fetch_add(1, std::memory_order_relaxed);
    adds_->fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void NamedQueue::Forget(const Keys& keys) {
  for (const std::string& key : keys) queue_->Forget(key);
}

int64_t NamedQueue::NumRequeues(absl::string_view key) { return queue_->NumRequeues(key); }

size_t NamedQueue::Len() const { return queue_->Len(); }

// ---- QueueRegistry ----

QueueRegistry::QueueRegistry(InformerLookup informers, QueueRegistryOptions options)
    : informers_(std::move(informers)), options_(options) {
  if (options_.metrics != nullptr) {
    metrics_provider_ = std::make_unique<workqueue::PrometheusMetricsProvider>(options_.metrics);
  }
}

QueueRegistry::~QueueRegistry() {
  absl::flat_hash_map<std::string, std::shared_ptr<NamedQueue>> queues;
  {
    MutexLock lock(&mu_);
    queues.swap(queues_);
  }
  for (auto& [name, q] : queues) {
    q->Close(absl::UnavailableError("informerd is shutting down"));
  }
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::Create(const v1::QueueSpec& in) {
  if (std::string why = InvalidNameReason(in.name()); !why.empty()) {
    return Invalid("spec.name", why);
  }
  v1::QueueSpec spec = in;
  if (spec.rate_limiter().kind_case() == v1::RateLimiterSpec::KIND_NOT_SET) {
    spec.mutable_rate_limiter()->mutable_default_controller();
  }
  Clock* clock = options_.clock != nullptr ? options_.clock : Clock::Real();
  auto limiter = BuildLimiter(spec.rate_limiter(), "spec.rate_limiter", 0, clock);
  if (!limiter.ok()) return limiter.status();
  if (spec.resync_period_ms() != 0 &&
      (spec.resync_period_ms() < 1000 || spec.resync_period_ms() > kMaxDelayMs)) {
    return Invalid("spec.resync_period_ms", absl::StrCat("must be 0 or in 1000..", kMaxDelayMs));
  }

  // Sources are resolved before the queue exists: a bad one creates nothing.
  struct Resolved {
    std::shared_ptr<informer::SharedInformer> informer;
    std::shared_ptr<Mapper> mapper;
  };
  std::vector<Resolved> resolved;
  for (int i = 0; i < spec.sources_size(); ++i) {
    const v1::QueueSource& src = spec.sources(i);
    const std::string f = absl::StrCat("spec.sources[", i, "]");
    if (src.informer_id().empty()) return Invalid(f + ".informer_id", "required");
    std::shared_ptr<informer::SharedInformer> inf = informers_(src.informer_id());
    if (inf == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(f, ".informer_id: no such informer \"", src.informer_id(), "\""));
    }
    auto mapper = std::make_shared<Mapper>();
    auto selector = informer::LabelSelector::Parse(src.label_selector());
    if (!selector.ok()) return Invalid(f + ".label_selector", selector.status().message());
    mapper->selector = std::move(*selector);
    switch (src.map_to_case()) {
      case v1::QueueSource::MAP_TO_NOT_SET:
      case v1::QueueSource::kObject:
        break;
      case v1::QueueSource::kOwner:
        if (src.owner().kind().empty()) return Invalid(f + ".owner.kind", "required");
        mapper->kind = Mapper::Kind::kOwner;
        mapper->owner_kind = src.owner().kind();
        break;
      case v1::QueueSource::kIndex: {
        const v1::IndexLookup& ix = src.index();
        if (ix.informer_id().empty()) return Invalid(f + ".index.informer_id", "required");
        std::shared_ptr<informer::SharedInformer> target = informers_(ix.informer_id());
        if (target == nullptr) {
          return absl::NotFoundError(absl::StrCat(f, ".index.informer_id: no such informer \"",
                                                  ix.informer_id(), "\""));
        }
        if (ix.index_name().empty()) return Invalid(f + ".index.index_name", "required");
        const std::vector<std::string> names = target->store().IndexNames();
        if (std::find(names.begin(), names.end(), ix.index_name()) == names.end()) {
          return Invalid(f + ".index.index_name",
                         absl::StrCat("informer ", ix.informer_id(), " has no index \"",
                                      ix.index_name(), "\""));
        }
        if (!v1::IndexLookup::ValueFrom_IsValid(ix.value_from())) {
          return Invalid(f + ".index.value_from", "must be KEY or NAME");
        }
        mapper->kind = Mapper::Kind::kIndex;
        mapper->index_informer = target;
        mapper->index_name = ix.index_name();
        mapper->value_from = ix.value_from();
        break;
      }
    }
    resolved.push_back({std::move(inf), std::move(mapper)});
  }

  MutexLock lock(&mu_);
  if (auto it = queues_.find(spec.name()); it != queues_.end()) {
    // Equal specs serialize equally (no maps, no unknown fields after our normalization).
    if (it->second->spec().SerializeAsString() == spec.SerializeAsString()) return it->second;
    return absl::FailedPreconditionError(absl::StrCat(
        "spec: queue ", spec.name(), " exists with a different spec; delete it first"));
  }
  auto queue = workqueue::RateLimitingQueue::Create(
      {.name = spec.name(), .clock = clock, .metrics_provider = metrics_provider_.get()},
      std::move(*limiter));
  if (!queue.ok()) return queue.status();
  std::shared_ptr<workqueue::RateLimitingQueue> shared_queue(std::move(*queue));
  std::shared_ptr<NamedQueue> named(new NamedQueue(spec, shared_queue, clock));
  std::vector<std::unique_ptr<NamedQueue::Binding>> bindings;
  for (Resolved& r : resolved) {
    r.mapper->queue = shared_queue;
    r.mapper->adds = named->adds_;
    auto b = std::make_unique<NamedQueue::Binding>();
    b->informer = std::move(r.informer);
    b->mapper = std::move(r.mapper);
    bindings.push_back(std::move(b));
  }
  if (absl::Status s = named->Start(std::move(bindings)); !s.ok()) {
    named->Close(s);
    return s;
  }
  queues_.emplace(spec.name(), named);
  return named;
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::Get(absl::string_view name) const {
  MutexLock lock(&mu_);
  auto it = queues_.find(name);
  if (it == queues_.end()) return absl::NotFoundError(absl::StrCat("queue \"", name, "\" not found"));
  return it->second;
}

absl::Status QueueRegistry::Delete(absl::string_view name) {
  std::shared_ptr<NamedQueue> q;
  {
    MutexLock lock(&mu_);
    auto it = queues_.find(name);
    if (it == queues_.end()) {
      return absl::NotFoundError(absl::StrCat("queue \"", name, "\" not found"));
    }
    q = std::move(it->second);
    queues_.erase(it);
  }
  q->Close(absl::NotFoundError(absl::StrCat("queue ", name, " was deleted")));
  return absl::OkStatus();
}

std::vector<std::shared_ptr<NamedQueue>> QueueRegistry::List() const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<NamedQueue>> out;
  for (const auto& [name, q] : queues_) out.push_back(q);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->name() < b->name(); });
  return out;
}

void QueueRegistry::ShutDownAll(absl::Duration drain_deadline) {
  const absl::Time deadline = absl::Now() + drain_deadline;
  std::vector<std::shared_ptr<NamedQueue>> queues = List();
  for (auto& q : queues) q->ShutDown();  // all stop at once; then wait for each
  for (auto& q : queues) q->ShutDownAndDrain(deadline);
  for (auto& q : queues) q->Close(absl::UnavailableError("informerd is shutting down"));
}

}  // namespace informerd::service
