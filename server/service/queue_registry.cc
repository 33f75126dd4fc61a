#include "base/log.h"
#include "client/api_error.h"
#include "server/service/queue_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/leader_gate.h"
#include "server/service/status.h"
#include "spdlog/spdlog.h"

namespace informerd::service {
namespace {

using workqueue::Lease;

absl::Status ShutDownError(absl::string_view name) {
  return Error(absl::StatusCode::kFailedPrecondition, v1::QUEUE_SHUT_DOWN,
               absl::StrCat("queue ", name, " is shut down"), {{"queue", name}});
}

absl::Status QueueNotFound(absl::string_view name) {
  return Error(absl::StatusCode::kNotFound, v1::QUEUE_NOT_FOUND,
               absl::StrCat("queue \"", name, "\" not found"), {{"queue", name}});
}

absl::Status ShuttingDown() {
  return Error(absl::StatusCode::kUnavailable, v1::DAEMON_SHUTTING_DOWN,
               "informerd is shutting down");
}

uint64_t NowNanos() { return static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())); }

}  // namespace

// ---- NamedQueue ----

NamedQueue::NamedQueue(v1::QueueSpec spec, std::shared_ptr<workqueue::RateLimitingQueue> queue,
                       Clock* clock, Series series, uint64_t epoch, const LeaderGate* gate)
    : name_(spec.name()),
      clock_(clock),
      epoch_(epoch),
      gate_(gate),
      queue_(queue),
      adds_(std::make_shared<std::atomic<uint64_t>>(0)),
      series_(std::move(series)),
      leases_(std::move(queue),
              {.queue_name = spec.name(),
               .clock = clock,
               .lease_timeout = absl::Milliseconds(spec.lease_timeout_ms()),
               .expirations = series_.expirations.get(),
               .workers = series_.workers.get()}),
      spec_(std::move(spec)) {}

NamedQueue::~NamedQueue() { Close(absl::CancelledError(absl::StrCat("queue ", name(), " closed"))); }

v1::QueueSpec NamedQueue::spec() const {
  MutexLock lock(&mu_);
  return spec_;
}

void NamedQueue::Start(Bindings bindings) {
  resync_timer_ = clock_->CreateTimer([this] { OnResync(); });
  {
    MutexLock lock(&mu_);
    bindings_ = std::move(bindings);
    ArmResyncLocked();
  }
  dispatcher_ = std::thread([this] { Dispatch(); });
}

void NamedQueue::ArmResyncLocked() {
  if (spec_.resync_period_ms() > 0 && !bindings_.empty()) {
    resync_timer_->ArmAt(clock_->Now() + absl::Milliseconds(spec_.resync_period_ms()));
  } else {
    resync_timer_->Disarm();
  }
}

void NamedQueue::Update(v1::QueueSpec spec, std::unique_ptr<workqueue::RateLimiter> limiter,
                        Bindings bindings) {
  Bindings old;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    const bool limiter_changed =
        spec.rate_limiter().SerializeAsString() != spec_.rate_limiter().SerializeAsString();
    if (limiter_changed) queue_->SetRateLimiter(std::move(limiter));
    leases_.SetLeaseTimeout(absl::Milliseconds(spec.lease_timeout_ms()));
    queue_->SetPriorityAging(PriorityAging(spec)).IgnoreError();  // validated: positive
    const bool resync_changed = spec.resync_period_ms() != spec_.resync_period_ms();
    // nullptr: keep the running binding of an equal source (QueueRegistry::Bind).
    std::vector<bool> taken(bindings_.size(), false);
    for (int i = 0; i < spec.sources_size(); ++i) {
      if (bindings[i] != nullptr) continue;
      const std::string wanted = spec.sources(i).SerializeAsString();
      for (int j = 0; j < spec_.sources_size(); ++j) {
        if (!taken[j] && spec_.sources(j).SerializeAsString() == wanted) {
          taken[j] = true;
          bindings[i] = std::move(bindings_[j]);
          break;
        }
      }
    }
    old.swap(bindings_);  // what was not kept is unbound below
    bindings_ = std::move(bindings);
    spec_ = std::move(spec);
    if (resync_changed || old.empty() != bindings_.empty()) ArmResyncLocked();
  }
  // Unbound outside the lock: unbinding waits for the pump, which never takes mu_.
  old.clear();
}

void NamedQueue::OnResync() {
  // Resync bypasses predicates: every object of every source maps again. The mappers and sinks
  // are copied under the lock and used outside it, so a resync of a large informer does not hold
  // up Update, spec() or Close.
  std::vector<std::pair<std::shared_ptr<const SourceMapper>, KeySink>> sources;
  {
    MutexLock lock(&mu_);
    for (const auto& b : bindings_) sources.emplace_back(b->mapper_ptr(), b->sink());
    ArmResyncLocked();
  }
  for (const auto& [mapper, sink] : sources) {
    // Copy first: ForEach holds the store's lock, and an index lookup may read this very store.
    std::vector<informer::ObjectPtr> objects;
    mapper->informer()->store().ForEach([&](const informer::ObjectPtr& o) { objects.push_back(o); });
    const int32_t priority = mapper->Priority(AddCause::kUnchanged);
    for (const auto& o : objects) {
      mapper->Map(*o, [&sink = sink, priority](absl::string_view key) {
        sink.Enqueue(key, priority);
      });
    }
  }
}

void NamedQueue::Close(const absl::Status& status) {
  Bindings bindings;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    bindings.swap(bindings_);
  }
  leases_.Stop();
  queue_->ShutDown();  // wakes the dispatcher out of GetBatch
  resync_timer_.reset();
  bindings.clear();
  if (dispatcher_.joinable()) dispatcher_.join();
  // Every worker is told, including those still holding keys: their outcomes no longer matter.
  leases_.CloseWorkers(status, /*idle_only=*/false);
}

void NamedQueue::ShutDown() {
  leases_.Stop();
  queue_->ShutDown();
  leases_.CloseWorkers(absl::OkStatus(), /*idle_only=*/true);
}

bool NamedQueue::ShutDownAndDrain(absl::Time deadline) {
  ShutDown();
  return leases_.AwaitNoneInFlight(deadline);
}

bool NamedQueue::ShuttingDown() const { return queue_->ShuttingDown(); }

bool NamedQueue::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

void NamedQueue::Dispatch() {
  std::vector<Lease> leases;
  while (size_t want = leases_.AwaitCredit()) {
    leases.clear();
    if (queue_->GetBatch(want, &leases) == 0) return;  // shut down and empty
    if (gate_ != nullptr && !gate_->MayDispatch()) {
      // The replica's term ended (or its renew deadline passed): nothing more is handed out. The
      // keys go back; the registry closes this queue once the elector notices.
      leases_.Return(leases);
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    // Outside any lock: a sink may call back (its stream ending detaches its worker). A worker
    // detached meanwhile has already given these keys back; its sink drops them.
    for (LeaseTable::Delivery& d : leases_.Assign(&leases)) d.sink->Deliver(std::move(d.leases));
  }
}

v1::QueueState NamedQueue::State() const {
  v1::QueueState s;
  s.set_depth(queue_->Len());
  s.set_in_flight(queue_->Processing());
  s.set_delayed(queue_->Waiting());
  s.set_workers(leases_.worker_count());
  s.set_adds(adds_->load(std::memory_order_relaxed));
  s.set_retries(retries_.load(std::memory_order_relaxed) + leases_.retries());
  s.set_shutting_down(queue_->ShuttingDown());
  s.set_expired_leases(leases_.expired());
  // The lowest priorities past kMaxDepthByPriority - 1 summed at the highest of them.
  for (const auto& [priority, depth] : queue_->LenByPriority(kMaxDepthByPriority)) {
    v1::PriorityDepth* d = s.add_depth_by_priority();
    d->set_priority(priority);
    d->set_depth(depth);
  }
  return s;
}

absl::Status NamedQueue::HasRoomFor(size_t keys) const {
  const size_t held = queue_->Len() + queue_->Waiting();
  if (held + keys <= max_keys_) return absl::OkStatus();
  return Error(absl::StatusCode::kResourceExhausted, v1::RESOURCE_EXHAUSTED,
               absl::StrCat("queue ", name(), " holds ", held, " keys waiting or delayed; ",
                            keys, " more would pass its limit of ", max_keys_,
                            " (keys from its sources are still taken)"),
               {{"queue", name()}, {"limit", absl::StrCat(max_keys_)}});
}

absl::Status NamedQueue::Add(const Keys& keys, int32_t priority) {
  if (absl::Status room = HasRoomFor(keys.size()); !room.ok()) return room;
  for (const std::string& key : keys) {
    if (!CountedAdd(*adds_, [&] { return queue_->Add(key, priority); })) {
      return ShutDownError(name());
    }
  }
  return absl::OkStatus();
}

absl::Status NamedQueue::AddAfter(const Keys& keys, absl::Duration delay, int32_t priority) {
  if (absl::Status room = HasRoomFor(keys.size()); !room.ok()) return room;
  for (const std::string& key : keys) {
    if (!CountedAdd(*adds_, [&] { return queue_->AddAfter(key, delay, priority); })) {
      return ShutDownError(name());
    }
    if (delay > absl::ZeroDuration()) retries_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status NamedQueue::AddRateLimited(const Keys& keys, int32_t priority) {
  if (absl::Status room = HasRoomFor(keys.size()); !room.ok()) return room;
  for (const std::string& key : keys) {
    if (!CountedAdd(*adds_, [&] { return queue_->AddRateLimited(key, priority); })) {
      return ShutDownError(name());
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void NamedQueue::Forget(const Keys& keys) {
  for (const std::string& key : keys) queue_->Forget(key);
}

int64_t NamedQueue::NumRequeues(absl::string_view key) { return queue_->NumRequeues(key); }

size_t NamedQueue::Len() const { return queue_->Len(); }

// ---- QueueRegistry ----

QueueRegistry::QueueRegistry(SourceLookups lookups, QueueRegistryOptions options)
    : lookups_(std::move(lookups)),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      epoch_(options.epoch != 0 ? options.epoch : NowNanos()),
      serving_(options.gate == nullptr) {
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
    q->Close(ShuttingDown());
  }
}

absl::StatusOr<QueueRegistry::Built> QueueRegistry::Build(const v1::QueueSpec& in) const {
  auto spec = NormalizeQueueSpec(in);
  if (!spec.ok()) return spec.status();
  Built built;
  built.spec = *std::move(spec);
  auto limiter = BuildRateLimiter(built.spec.rate_limiter(), "spec.rate_limiter", clock_);
  if (!limiter.ok()) return limiter.status();
  built.limiter = *std::move(limiter);
  // Sources are resolved before anything changes: a bad one creates or changes nothing.
  for (int i = 0; i < built.spec.sources_size(); ++i) {
    auto mapper = SourceMapper::Create(built.spec.sources(i),
                                       absl::StrCat("spec.sources[", i, "]"), lookups_);
    if (!mapper.ok()) return mapper.status();
    built.mappers.push_back(*std::move(mapper));
  }
  return built;
}

absl::StatusOr<NamedQueue::Bindings> QueueRegistry::Bind(const Built& built, NamedQueue* queue,
                                                         const v1::QueueSpec* running) {
  NamedQueue::Bindings bindings;
  std::vector<bool> reused(running != nullptr ? running->sources_size() : 0, false);
  for (size_t i = 0; i < built.mappers.size(); ++i) {
    // A source the running queue already has keeps its binding (nullptr here): it has mapped
    // its objects already, and re-binding would enqueue them all again.
    bool keep = false;
    if (running != nullptr) {
      const std::string wanted = built.spec.sources(i).SerializeAsString();
      for (int j = 0; j < running->sources_size() && !keep; ++j) {
        if (!reused[j] && running->sources(j).SerializeAsString() == wanted) {
          reused[j] = keep = true;
        }
      }
    }
    if (keep) {
      bindings.push_back(nullptr);
      continue;
    }
    auto b = pump_.Bind(built.mappers[i], KeySink{.queue = queue->queue_, .adds = queue->adds_},
                        absl::StrCat("queue:", queue->name()));
    if (!b.ok()) return b.status();
    bindings.push_back(*std::move(b));
  }
  return bindings;
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::CreateLocked(Built built) {
  auto queue = workqueue::RateLimitingQueue::Create({.name = built.spec.name(),
                                                     .clock = clock_,
                                                     .metrics_provider = metrics_provider_.get(),
                                                     .first_token = epoch_,
                                                     .priority_aging = PriorityAging(built.spec)},
                                                    std::move(built.limiter));
  if (!queue.ok()) return queue.status();
  NamedQueue::Series series;
  if (options_.metrics != nullptr) {
    const Labels labels = {{"name", built.spec.name()}};
    series.expirations = options_.metrics->SharedCounter(
        "informerd_work_lease_expirations_total",
        "Leases that expired without an outcome or heartbeat (the key was handed out again)",
        labels);
    series.workers = options_.metrics->SharedGauge(
        "informerd_queue_workers", "Work streams on the queue (draining ones included).", labels);
  }
  std::shared_ptr<NamedQueue> named(
      new NamedQueue(built.spec, std::shared_ptr<workqueue::RateLimitingQueue>(std::move(*queue)),
                     clock_, std::move(series), epoch_, options_.gate));
  named->max_keys_ = options_.max_queue_keys;
  auto bindings = Bind(built, named.get(), /*running=*/nullptr);
  if (!bindings.ok()) {
    named->Close(bindings.status());
    RemoveMetricsLocked(built.spec.name());
    return bindings.status();
  }
  named->Start(*std::move(bindings));
  named->Touch(clock_->Now());
  queues_.emplace(named->name(), named);
  return named;
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::Create(const v1::QueueSpec& in,
                                                                  Persist persist) {
  auto built = Build(in);
  if (!built.ok()) return built.status();
  // Held across the change and its write to the store (see spec_writes_).
  KeyedMutex::Lock write(&spec_writes_, built->spec.name());
  std::shared_ptr<NamedQueue> created;
  {
    MutexLock lock(&mu_);
    // A restore (kNo) runs before the term's gate opens.
    if (!serving_ || (persist == Persist::kYes && !ServingLocked())) return NotServing();
    if (auto it = queues_.find(built->spec.name()); it != queues_.end()) {
      // Equal specs serialize equally (no maps, no unknown fields after our normalization).
      if (it->second->spec().SerializeAsString() == built->spec.SerializeAsString()) {
        it->second->Touch(clock_->Now());
        return it->second;
      }
      return Error(absl::StatusCode::kFailedPrecondition, v1::QUEUE_EXISTS_WITH_OTHER_SPEC,
                   absl::StrCat("spec: queue ", built->spec.name(),
                                " exists with a different spec; change it with UpdateQueue"),
                   {{"queue", built->spec.name()}});
    }
    auto q = CreateLocked(*std::move(built));
    if (!q.ok() || persist == Persist::kNo || options_.store == nullptr) return q;
    created = *std::move(q);
  }
  if (absl::Status s = Save(created->spec()); !s.ok()) {
    // Not kept across leaders: not created at all.
    MutexLock lock(&mu_);
    if (auto it = queues_.find(created->name()); it != queues_.end() && it->second == created) {
      queues_.erase(it);
      RemoveMetricsLocked(created->name());
    }
    created->Close(s);
    return s;
  }
  return created;
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::Update(const v1::QueueSpec& in,
                                                                  bool allow_missing) {
  auto built = Build(in);
  if (!built.ok()) return built.status();
  KeyedMutex::Lock write(&spec_writes_, built->spec.name());
  std::shared_ptr<NamedQueue> named;
  {
    MutexLock lock(&mu_);
    if (!ServingLocked()) return NotServing();
    auto it = queues_.find(built->spec.name());
    if (it == queues_.end()) {
      if (!allow_missing) {
        return QueueNotFound(built->spec.name());
      }
      auto q = CreateLocked(*std::move(built));
      if (!q.ok()) return q;
      named = *std::move(q);
    } else {
      named = it->second;
      named->Touch(clock_->Now());
      if (named->spec().SerializeAsString() == built->spec.SerializeAsString()) return named;
      const v1::QueueSpec running = named->spec();
      auto bindings = Bind(*built, named.get(), &running);
      if (!bindings.ok()) return bindings.status();
      named->Update(std::move(built->spec), std::move(built->limiter), *std::move(bindings));
    }
    if (options_.store == nullptr || named->pinned()) return named;
  }
  if (absl::Status s = Save(named->spec()); !s.ok()) {
    return Prefixed(
        "the queue was changed on this replica but its spec could not be stored for the next "
        "leader; retry the update: ",
        s);
  }
  return named;
}

absl::StatusOr<std::shared_ptr<NamedQueue>> QueueRegistry::Get(absl::string_view name) const {
  MutexLock lock(&mu_);
  if (!ServingLocked()) return NotServing();
  auto it = queues_.find(name);
  if (it == queues_.end()) return QueueNotFound(name);
  it->second->Touch(clock_->Now());
  return it->second;
}

absl::Status QueueRegistry::Delete(absl::string_view name) {
  KeyedMutex::Lock write(&spec_writes_, name);
  {
    MutexLock lock(&mu_);
    if (!ServingLocked()) return NotServing();
    if (!queues_.contains(name)) return QueueNotFound(name);
  }
  // Removed from the store first: a queue deleted here must not come back at the next leader.
  if (absl::Status s = Unsave(name); !s.ok()) return s;
  std::shared_ptr<NamedQueue> q;
  {
    MutexLock lock(&mu_);
    auto it = queues_.find(name);
    if (it == queues_.end()) {
      return QueueNotFound(name);
    }
    q = std::move(it->second);
    queues_.erase(it);
    // Under mu_: a queue of the same name created right after gets fresh series, not removed ones.
    RemoveMetricsLocked(name);
  }
  q->Close(Error(absl::StatusCode::kNotFound, v1::QUEUE_NOT_FOUND,
                 absl::StrCat("queue ", name, " was deleted"), {{"queue", name}}));
  return absl::OkStatus();
}

bool QueueRegistry::FreeIfUnused(absl::string_view name, absl::Time cutoff) {
  KeyedMutex::Lock write(&spec_writes_, name);
  std::shared_ptr<NamedQueue> q;
  {
    MutexLock lock(&mu_);
    auto it = queues_.find(name);
    if (!ServingLocked()) return false;
    if (it == queues_.end()) return false;
    const NamedQueue& named = *it->second;
    if (named.pinned() || named.last_used() > cutoff || named.worker_count() > 0) return false;
    q = std::move(it->second);
    queues_.erase(it);
    RemoveMetricsLocked(name);
  }
  q->Close(Error(absl::StatusCode::kNotFound, v1::QUEUE_NOT_FOUND,
                 absl::StrCat("queue ", name, " was freed: unused since ",
                              absl::FormatTime(q->last_used())),
                 {{"queue", name}}));
  if (absl::Status s = Unsave(name); !s.ok()) {
    LogWithFields(spdlog::level::warn, {{"queue", name}, {"error", client::DescribeStatus(s)}},
                  "queue freed, but its stored spec could not be removed (the next leader will "
                  "create it again)");
  }
  return true;
}

bool QueueRegistry::ServingLocked() const {
  return serving_ && (options_.gate == nullptr || options_.gate->MayDispatch());
}

absl::Status QueueRegistry::NotServing() const {
  return options_.gate != nullptr ? options_.gate->Check() : NotLeaderError("", "");
}

absl::Status QueueRegistry::Save(const v1::QueueSpec& spec) {
  if (options_.store == nullptr) return absl::OkStatus();
  return options_.store->Save(spec);
}

absl::Status QueueRegistry::Unsave(absl::string_view name) {
  if (options_.store == nullptr) return absl::OkStatus();
  return options_.store->Remove(std::string(name));
}

void QueueRegistry::BeginTerm(uint64_t epoch) {
  MutexLock lock(&mu_);
  epoch_ = epoch;
  serving_ = true;
}

void QueueRegistry::EndTerm(const absl::Status& status) {
  absl::flat_hash_map<std::string, std::shared_ptr<NamedQueue>> queues;
  {
    MutexLock lock(&mu_);
    serving_ = false;
    queues.swap(queues_);
    for (const auto& [name, q] : queues) RemoveMetricsLocked(name);
  }
  for (auto& [name, q] : queues) q->Close(status);
}

void QueueRegistry::RemoveMetricsLocked(absl::string_view name) {
  if (options_.metrics == nullptr) return;
  metrics_provider_->RemoveQueue(name);
  for (absl::string_view family : {"informerd_work_lease_expirations_total",
                                   "informerd_queue_workers",
                                   "informerd_queue_depth_by_priority"}) {
    options_.metrics->RemoveSeries(family, {{"name", std::string(name)}});
  }
}

void QueueRegistry::UpdateMetrics() {
  if (options_.metrics == nullptr) return;
  MutexLock lock(&mu_);  // a queue's series are made and removed under it
  for (const auto& [name, q] : queues_) {
    // Bounded work per scrape whatever priorities clients used: new series only for the highest
    // priorities waiting now, exact counts for the (at most 8) priorities with a series, and
    // the rest as the difference.
    if (q->priority_series_.size() < NamedQueue::kPrioritySeries) {
      for (const auto& [priority, depth] :
           q->queue_->LenByPriority(NamedQueue::kPrioritySeries + 1)) {
        if (q->priority_series_.size() == NamedQueue::kPrioritySeries) break;
        if (std::any_of(q->priority_series_.begin(), q->priority_series_.end(),
                        [p = priority](const auto& s) { return s.first == p; })) {
          continue;
        }
        q->priority_series_.emplace_back(
            priority, options_.metrics->GetGauge(
                          "informerd_queue_depth_by_priority",
                          "Keys waiting in the queue at each priority (the first 8 priorities "
                          "the queue used have a series each, later ones are summed in "
                          "priority=\"other\").",
                          {{"name", name}, {"priority", absl::StrCat(priority)}}));
      }
    }
    const size_t total = q->queue_->Len();
    size_t with_series = 0;
    for (auto& [priority, gauge] : q->priority_series_) {
      const size_t depth = q->queue_->LenAtPriority(priority);
      with_series += depth;
      gauge->Set(static_cast<double>(depth));
    }
    // Counts read one lock at a time may not add up while keys move: never below 0.
    const double other =
        total > with_series ? static_cast<double>(total - with_series) : 0.0;
    if (other > 0 && q->other_priority_series_ == nullptr) {
      q->other_priority_series_ = options_.metrics->GetGauge(
          "informerd_queue_depth_by_priority", "", {{"name", name}, {"priority", "other"}});
    }
    if (q->other_priority_series_ != nullptr) q->other_priority_series_->Set(other);
  }
}

std::vector<std::shared_ptr<NamedQueue>> QueueRegistry::List() const {
  MutexLock lock(&mu_);
  if (!ServingLocked()) return {};
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
  for (auto& q : queues) q->Close(ShuttingDown());
}

}  // namespace informerd::service
