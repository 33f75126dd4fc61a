#include "base/log.h"
#include "client/api_error.h"
#include "server/informer/shared_informer.h"

#include <algorithm>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/informer/informer_threads.h"
#include "spdlog/spdlog.h"

namespace informerd::informer {

// The cache as the FIFO's known objects.
class SharedInformer::StoreKnownObjects : public KnownObjects {
 public:
  explicit StoreKnownObjects(const ThreadSafeStore* store) : store_(store) {}
  ObjectPtr GetByKey(absl::string_view key) const override { return store_->Get(key).object; }
  void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const override { store_->ForEach(fn); }
  void ForEachKey(absl::FunctionRef<void(absl::string_view)> fn) const override {
    store_->ForEachKey(fn);
  }
  ObjectPtr GetUnchanged(const client::Object& object) const override {
    return store_->GetUnchanged(object);
  }

 private:
  const ThreadSafeStore* const store_;
};

absl::StatusOr<std::unique_ptr<SharedInformer>> SharedInformer::Create(
    SharedInformerOptions options) {
  if (options.lister_watcher == nullptr) {
    return absl::InvalidArgumentError("shared informer: lister_watcher is required");
  }
  if (options.default_buffer_size == 0) {
    return absl::InvalidArgumentError("shared informer: default_buffer_size must be positive");
  }
  // The transform applied here: the declared one, less what the source already does.
  TransformOptions applied = options.transform;
  if (options.lister_watcher->drops_managed_fields()) applied.strip_managed_fields = false;
  absl::StatusOr<std::unique_ptr<Transform>> transform = Transform::Create(applied);
  if (!transform.ok()) return transform.status();
  absl::StatusOr<std::unique_ptr<ThreadSafeStore>> store =
      ThreadSafeStore::Create(
          {.indexers = std::move(options.indexers), .compression = options.compression});
  if (!store.ok()) return store.status();

  std::unique_ptr<SharedInformer> informer(new SharedInformer(options));
  informer->transform_ = *std::move(transform);
  informer->store_ = *std::move(store);
  informer->known_objects_ = std::make_unique<StoreKnownObjects>(informer->store_.get());
  ThreadSafeStore* raw_store = informer->store_.get();
  SharedInformer* self = informer.get();
  informer->process_task_ = std::make_unique<SerialTask>(
      options.executor != nullptr ? options.executor : ProcessingExecutor(),
      [self] { self->ProcessStep(); });
  informer->fifo_ =
      DeltaFIFO::Create({.known_objects = informer->known_objects_.get(),
                         .emit_delta_type_replaced = true,
                         .on_idle_resource_version =
                             [raw_store](const std::string& rv) { raw_store->SetResourceVersion(rv); },
                         .on_ready = [self] { self->process_task_->Schedule(); }})
          .value();
  absl::StatusOr<std::unique_ptr<Reflector>> reflector = Reflector::Create({
      .name = informer->name_,
      .lister_watcher = informer->lister_watcher_.get(),
      .store = informer->fifo_.get(),
      .known_objects = informer->known_objects_.get(),
      .transform = informer->transform_->identity() ? nullptr : informer->transform_.get(),
      .expected_kind = options.expected_kind,
      .page_size = options.page_size,
      .use_streaming_list = options.use_streaming_list,
      .min_watch_timeout = options.min_watch_timeout,
      .stall_timeout = options.stall_timeout,
      .backoff = options.backoff,
      .clock = informer->clock_,
      .seed = options.seed,
      .executor = options.reflector_executor,
  });
  if (!reflector.ok()) return reflector.status();
  informer->reflector_ = *std::move(reflector);
  informer->resync_timer_ = informer->clock_->CreateTimer([self] { self->OnResyncTimer(); });
  if (informer->metrics_ != nullptr) {
    // The callback re-arms its own timer through a pointer that stays valid while the timer is
    // being destroyed (unlike the unique_ptr, which is cleared first).
    auto timer = std::make_shared<Timer*>(nullptr);
    informer->metrics_timer_ = informer->clock_->CreateTimer([self, timer] {
      if (self->stopping_.load()) return;
      self->UpdateMetrics();
      (*timer)->ArmAt(self->clock_->Now() + self->metrics_period_);
    });
    *timer = informer->metrics_timer_.get();
  }
  return informer;
}

SharedInformer::SharedInformer(SharedInformerOptions& options)
    : name_(options.name),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      metrics_(options.metrics),
      default_buffer_size_(options.default_buffer_size),
      metrics_period_(options.metrics_period),
      lister_watcher_(std::move(options.lister_watcher)) {}

SharedInformer::~SharedInformer() { Stop(); }

absl::Status SharedInformer::Start() {
  {
    MutexLock lock(&distribute_mu_);
    if (started_ || stopped_) {
      return absl::FailedPreconditionError(
          absl::StrCat("informer ", name_, stopped_ ? " was stopped" : " is already running"));
    }
    started_ = true;
  }
  started_processing_ = true;
  process_task_->Schedule();
  reflector_->Start();
  if (metrics_timer_ != nullptr) {
    UpdateMetrics();
    metrics_timer_->ArmAt(clock_->Now() + metrics_period_);
  }
  return absl::OkStatus();
}

void SharedInformer::Stop() {
  std::vector<std::shared_ptr<ProcessorListener>> listeners;
  {
    MutexLock lock(&distribute_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_ = true;
  if (reflector_ != nullptr) reflector_->Stop();  // null when Create failed part-way
  process_task_->Stop();  // waits for a turn in progress; none follows
  // Timers may be running callbacks that take distribute_mu_: destroy them without it.
  resync_timer_.reset();
  if (metrics_timer_ != nullptr) {
    metrics_timer_.reset();
    UpdateMetrics();
  }
  {
    MutexLock lock(&distribute_mu_);
    listeners.swap(listeners_);
  }
  for (const auto& listener : listeners) listener->Stop();
  listeners.clear();
  // Free the queue and the cache.
  while (fifo_->TryPop([](Deltas&, const PopContext&) { return absl::OkStatus(); }).ok()) {
  }
  store_->Replace({}, "");
  if (metrics_ != nullptr) {
    // Nothing updates them any more (the timer is gone, Start refuses): the informer's series
    // leave /metrics with it.
    MutexLock lock(&distribute_mu_);
    listener_metrics_.clear();
    const Labels labels = {{"informer", name_}};
    for (absl::string_view family :
         {"informer_objects", "informer_object_bytes", "informer_fifo_items", "informer_synced",
          "informer_handler_pending", "informer_handler_overflows_total", "informer_events_total",
          "informer_reflector_errors_total", "informer_lists_total", "informer_watches_total"}) {
      metrics_->RemoveSeries(family, labels);
    }
  }
}

void SharedInformer::RemoveListenerSeries(const std::string& handler) {
  const Labels labels = {{"informer", name_}, {"handler", handler}};
  metrics_->RemoveSeries("informer_handler_pending", labels);
  metrics_->RemoveSeries("informer_handler_overflows_total", labels);
}

bool SharedInformer::HasSynced() const { return fifo_->HasSynced(); }

// ---- handlers ----

absl::StatusOr<std::shared_ptr<ProcessorListener>> SharedInformer::AddEventHandler(
    std::shared_ptr<ResourceEventHandler> handler, HandlerOptions options) {
  if (handler == nullptr) return absl::InvalidArgumentError("AddEventHandler: null handler");
  return Register(std::move(handler), std::move(options));
}

absl::StatusOr<std::shared_ptr<ProcessorListener>> SharedInformer::AddListener(
    HandlerOptions options) {
  return Register(nullptr, std::move(options));
}

absl::StatusOr<std::shared_ptr<ProcessorListener>> SharedInformer::Register(
    std::shared_ptr<ResourceEventHandler> handler, HandlerOptions options) {
  if (options.resync_period > absl::ZeroDuration() && options.resync_period < absl::Seconds(1)) {
    return absl::InvalidArgumentError("resync_period must be 0 or at least 1s");
  }
  std::shared_ptr<ProcessorListener> listener;
  {
    MutexLock lock(&distribute_mu_);
    if (stopped_) {
      return absl::FailedPreconditionError(absl::StrCat("informer ", name_, " was stopped"));
    }
    if (options.name.empty()) options.name = absl::StrCat("handler-", ++handlers_named_);
    ProcessorListener::Options listener_options;
    listener_options.name = options.name;
    listener_options.buffer_size =
        options.buffer_size > 0 ? options.buffer_size : default_buffer_size_;
    listener_options.buffer_bytes = options.buffer_bytes;
    listener_options.resync_period = options.resync_period;
    listener_options.handler = std::move(handler);
    listener_options.on_ready = std::move(options.on_ready);
    listener = std::make_shared<ProcessorListener>(std::move(listener_options), this,
                                                   [this] { return HasSynced(); });
    if (started_) {
      // A late handler: the cache now, then everything distributed after this.
      listener->SetInitial(store_->Snapshot());
    }
    listener->ScheduleFirstResync(clock_->Now());
    listeners_.push_back(listener);
    ListenerMetrics m;
    if (metrics_ != nullptr) {
      const Labels labels = {{"informer", name_}, {"handler", listener->name()}};
      m.pending = metrics_->SharedGauge("informer_handler_pending",
                                        "Notifications waiting for the handler.", labels);
      m.overflows = metrics_->SharedCounter(
          "informer_handler_overflows_total",
          "Times the handler fell a full buffer behind and was told to re-snapshot.", labels);
    }
    listener_metrics_.push_back(m);
    RearmResyncLocked();
  }
  listener->Start();
  return listener;
}

absl::Status SharedInformer::RemoveEventHandler(const std::shared_ptr<ProcessorListener>& listener) {
  {
    MutexLock lock(&distribute_mu_);
    auto it = std::find(listeners_.begin(), listeners_.end(), listener);
    if (it == listeners_.end()) {
      return absl::NotFoundError("RemoveEventHandler: not registered with this informer");
    }
    const size_t i = it - listeners_.begin();
    listeners_.erase(it);
    listener_metrics_.erase(listener_metrics_.begin() + i);
    // The handler's series go with it (a Watch stream adds one handler per stream), unless
    // another handler of the same name (a queue's second source on this informer) still has them.
    const bool name_in_use =
        std::any_of(listeners_.begin(), listeners_.end(),
                    [&](const auto& other) { return other->name() == listener->name(); });
    if (metrics_ != nullptr && !name_in_use) RemoveListenerSeries(listener->name());
    RearmResyncLocked();
  }
  listener->Stop();
  return absl::OkStatus();
}

void SharedInformer::ResolveOverflow(ProcessorListener* listener) {
  MutexLock lock(&distribute_mu_);
  listener->FinishOverflow([&](absl::string_view key) { return store_->Get(key).object; });
}

// ---- processing ----

void SharedInformer::ProcessStep() {
  if (!started_processing_.load()) return;  // Start schedules the first turn
  // Batches: one queue lock per batch. A turn is bounded so that a busy informer does not keep
  // a shared thread from the others; the FIFO's on_ready schedules the turn after an empty one.
  for (int batch = 0; batch < 4; ++batch) {
    if (stopping_.load()) return;
    absl::Status status =
        fifo_->TryPopBatch(256, [this](Deltas& deltas, const PopContext& context) {
          return Process(deltas, context);
        });
    if (absl::IsUnavailable(status)) return;
  }
  process_task_->Schedule();
}

absl::Status SharedInformer::Process(Deltas& deltas, const PopContext& context) {
  // Live watch events arrive untransformed (the reflector keeps the transport thread to decoding);
  // listed objects are transformed already, and a transform is idempotent and cheap to re-apply.
  if (!transform_->identity()) {
    for (Delta& delta : deltas) {
      absl::StatusOr<ObjectPtr> transformed = transform_->Apply(delta.object);
      if (transformed.ok()) {
        delta.object = *std::move(transformed);
      } else {
        LogWithFields(spdlog::level::warn,
                      {{"informer", name_},
                       {"key", delta.object->key()},
                       {"error", client::DescribeStatus(transformed.status())}},
                      "transform failed, storing the object as received");
      }
    }
  }
  MutexLock lock(&distribute_mu_);
  for (Delta& delta : deltas) {
    Notification n;
    if (delta.type == DeltaType::kDeleted) {
      store_->Delete(delta.object->key());
      n.type = Notification::Type::kDelete;
      n.object = std::move(delta.object);
      n.final_state_unknown = delta.final_state_unknown;
      Distribute(n, /*sync=*/false);
      continue;
    }
    ObjectPtr old = store_->Update(delta.object);
    if (old != nullptr) {
      // An unchanged resourceVersion is a resync (or a relist that found the object as it was):
      // only handlers being resynced hear of it (client-go's OnUpdate).
      const bool sync = old->resource_version() == delta.object->resource_version();
      n.type = Notification::Type::kUpdate;
      n.old_object = std::move(old);
      n.object = std::move(delta.object);
      Distribute(n, sync);
    } else {
      n.type = Notification::Type::kAdd;
      n.object = std::move(delta.object);
      n.is_in_initial_list = context.is_in_initial_list;
      Distribute(n, /*sync=*/false);
    }
  }
  if (!context.drained_resource_version.empty()) {
    store_->SetResourceVersion(context.drained_resource_version);
  }
  // Handlers are woken once the queue is drained or every few keys, not once per change: each
  // wake-up is a context switch, and on a busy informer they would cost more than the changes.
  if (!context.drained_resource_version.empty() || ++undelivered_ >= kWakeEvery) {
    WakeListenersLocked();
  }
  return absl::OkStatus();
}

void SharedInformer::Distribute(const Notification& notification, bool sync) {
  for (const auto& listener : listeners_) {
    if (sync && !listener->is_syncing()) continue;
    listener->PushDeferred(notification);
  }
}

void SharedInformer::WakeListenersLocked() {
  for (const auto& listener : listeners_) listener->Wake();
  undelivered_ = 0;
}

// ---- resync ----

void SharedInformer::RearmResyncLocked() {
  if (resync_timer_ == nullptr) return;
  absl::Time next = absl::InfiniteFuture();
  for (const auto& listener : listeners_) next = std::min(next, listener->next_resync());
  if (next == absl::InfiniteFuture()) {
    resync_timer_->Disarm();
  } else {
    resync_timer_->ArmAt(next);
  }
}

void SharedInformer::OnResyncTimer() {
  bool any = false;
  {
    MutexLock lock(&distribute_mu_);
    if (stopped_) return;
    const absl::Time now = clock_->Now();
    for (const auto& listener : listeners_) any = listener->ShouldResync(now) || any;
    RearmResyncLocked();
  }
  // Outside the distribution lock: Resync takes the FIFO's process lock, which is taken before it.
  if (any) fifo_->Resync();
}

// ---- memory and metrics ----

InformerMemory SharedInformer::memory() const {
  InformerMemory memory;
  memory.store = store_->memory();
  memory.fifo_items = fifo_->Len();
  MutexLock lock(&distribute_mu_);
  for (const auto& listener : listeners_) memory.pending_notifications += listener->pending();
  return memory;
}

absl::Status SharedInformer::AddIndexers(std::vector<IndexSpec> indexers) {
  return store_->AddIndexers(std::move(indexers));
}

void SharedInformer::UpdateMetrics() {
  if (metrics_ == nullptr) return;
  const Labels labels = {{"informer", name_}};
  const MemoryUsage usage = store_->memory();
  metrics_->GetGauge("informer_objects", "Objects in the informer's cache.", labels)
      ->Set(static_cast<double>(usage.objects));
  metrics_->GetGauge("informer_object_bytes", "Bytes held by the informer's cache.", labels)
      ->Set(static_cast<double>(usage.bytes));
  metrics_->GetGauge("informer_fifo_items", "Keys queued between reflector and cache.", labels)
      ->Set(static_cast<double>(fifo_->Len()));
  metrics_->GetGauge("informer_synced", "1 once the informer has synced.", labels)
      ->Set(HasSynced() ? 1 : 0);
  const ReflectorStatus status = reflector_->status();
  MutexLock lock(&distribute_mu_);
  // The reflector counts for the informer's life; its counters get what came since last time.
  const auto report = [&](absl::string_view name, absl::string_view help, uint64_t now,
                          uint64_t& reported) {
    Counter* counter = metrics_->GetCounter(name, help, labels);
    if (now > reported) counter->Inc(static_cast<double>(now - reported));
    reported = std::max(reported, now);
  };
  report("informer_events_total", "Watch events the reflector received (bookmarks excluded).",
         status.events, reflector_reported_.events);
  report("informer_reflector_errors_total",
         "Errors listing or watching (each retried with backoff; Admin shows the last).",
         status.errors, reflector_reported_.errors);
  report("informer_lists_total", "List requests the reflector made.", status.list_requests,
         reflector_reported_.lists);
  report("informer_watches_total", "Watches the reflector started.", status.watches_started,
         reflector_reported_.watches);
  for (size_t i = 0; i < listeners_.size(); ++i) {
    ListenerMetrics& m = listener_metrics_[i];
    if (m.pending != nullptr) m.pending->Set(static_cast<double>(listeners_[i]->pending()));
    const uint64_t overflows = listeners_[i]->overflows();
    if (m.overflows != nullptr && overflows > m.overflows_reported) {
      m.overflows->Inc(static_cast<double>(overflows - m.overflows_reported));
      m.overflows_reported = overflows;
    }
  }
}

}  // namespace informerd::informer
