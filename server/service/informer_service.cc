// InformerService: see informer_service.h.
#include "server/service/informer_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/tsan.h"
#include "client/api_error.h"
#include "server/informer/field_selector.h"
#include "server/informer/label_selector.h"
#include "server/informer/processor_listener.h"
#include "server/service/access.h"
#include "server/service/limits.h"
#include "server/service/object_proto.h"
#include "server/service/raw_request.h"
#include "server/service/status.h"
#include "server/service/watch_encoding.h"

namespace informerd::service {
namespace {

using informer::Notification;
using informer::ObjectPtr;

constexpr uint32_t kDefaultListBatch = 500;
constexpr uint32_t kMaxListBatch = 10000;
constexpr uint32_t kDefaultWatchBuffer = 4096;
constexpr uint32_t kDefaultWatchBatch = 256;

grpc::Status InvalidArgument(absl::string_view field, absl::string_view what) {
  return ToGrpc(InvalidField(field, what));
}

grpc::Status InformerDeleted(absl::string_view id) {
  return ToGrpc(Error(absl::StatusCode::kUnavailable, v1::INFORMER_DELETED,
                      absl::StrCat("informer ", id, " was deleted"), {{"informer_id", id}}));
}

// The reflector's state as the API names it: the enum and the (deprecated) string.
std::pair<v1::ReflectorState, absl::string_view> ReflectorStateNames(informer::ReflectorState s) {
  switch (s) {
    case informer::ReflectorState::kIdle:
      return {v1::REFLECTOR_STATE_IDLE, "idle"};
    case informer::ReflectorState::kListing:
      return {v1::REFLECTOR_STATE_LISTING, "listing"};
    case informer::ReflectorState::kWatching:
      return {v1::REFLECTOR_STATE_WATCHING, "watching"};
    case informer::ReflectorState::kBackingOff:
      return {v1::REFLECTOR_STATE_BACKING_OFF, "backing-off"};
    case informer::ReflectorState::kStopped:
      return {v1::REFLECTOR_STATE_STOPPED, "stopped"};
  }
  return {v1::REFLECTOR_STATE_UNSPECIFIED, ""};
}

// DEADLINE_EXCEEDED, NOT_SYNCED: why WaitForSync gave up, with what the reflector is doing.
grpc::Status NotSynced(const InformerRegistry::Entry& entry) {
  const informer::ReflectorStatus status = entry.informer->reflector_status();
  const auto [state, state_name] = ReflectorStateNames(status.state);
  const std::string state_enum = v1::ReflectorState_Name(state);
  const std::string last_error = client::DescribeStatus(status.last_error);
  const std::string kubernetes_reason = client::ApiErrorReason(status.last_error);
  std::string message =
      absl::StrCat("informer ", entry.id, " has not synced yet: its reflector is ", state_name);
  std::vector<std::pair<absl::string_view, absl::string_view>> metadata = {
      {"informer_id", entry.id}, {"reflector_state", state_enum}};
  if (!last_error.empty()) {
    absl::StrAppend(&message, "; last error: ", last_error);
    metadata.emplace_back("last_error", last_error);
  }
  if (!kubernetes_reason.empty()) metadata.emplace_back("kubernetes_reason", kubernetes_reason);
  return ToGrpc(
      Error(absl::StatusCode::kDeadlineExceeded, v1::NOT_SYNCED, message, metadata));
}

// Answers a streaming call with an error and nothing else.
template <typename Response>
class ErrorWriteReactor : public grpc::ServerWriteReactor<Response> {
 public:
  explicit ErrorWriteReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

template <typename Response>
grpc::ServerWriteReactor<Response>* Fail(grpc::Status status) {
  return new ErrorWriteReactor<Response>(std::move(status));
}

grpc::ServerUnaryReactor* Answer(grpc::ServerUnaryReactor* reactor, grpc::Status status) {
  reactor->Finish(std::move(status));
  return reactor;
}

grpc::Status CheckMaxBatchBytes(uint32_t requested) {
  if (requested > kMaxMaxBatchBytes) {
    return InvalidArgument("max_batch_bytes", absl::StrCat("at most ", kMaxMaxBatchBytes));
  }
  return grpc::Status::OK;
}

// The byte cap of a List or Watch message (limits.h); `requested` passed CheckMaxBatchBytes.
size_t MaxBatchBytes(uint32_t requested) {
  return requested == 0 ? kDefaultMaxBatchBytes : requested;
}

grpc::Status CheckId(absl::string_view id) {
  if (id.empty()) return InvalidArgument("informer_id", "required");
  if (id.size() > 512) return InvalidArgument("informer_id", "too long");
  return grpc::Status::OK;
}

}  // namespace

// ---- WaitForSync: polls HasSynced on a timer until it holds or the deadline passes ----

class InformerService::WaitForSyncReactor : public grpc::ServerUnaryReactor {
 public:
  WaitForSyncReactor(const InformerService* service, absl::Time deadline,
                     v1::InformerInfo* response)
      : service_(service), deadline_(deadline), response_(response),
        timer_(service->clock_->CreateTimer([this] { Check(); })) {}

  // Once the caller is allowed: polls the informer (or answers `entry`'s error).
  void Start(absl::StatusOr<InformerRegistry::Entry> entry, auth::Ticket ticket) {
    bool cancelled;
    {
      MutexLock lock(&mu_);
      started_ = true;
      cancelled = cancelled_;
      ticket_ = std::move(ticket);
      if (entry.ok()) entry_ = *entry;
    }
    if (cancelled) {
      FinishOnce(grpc::Status::CANCELLED);
    } else if (!entry.ok()) {
      FinishOnce(ToGrpc(entry.status()));
    } else {
      Check();
    }
  }
  // Refused before it started.
  void Refuse(grpc::Status status) {
    {
      MutexLock lock(&mu_);
      started_ = true;
    }
    FinishOnce(std::move(status));
  }

  void OnCancel() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      if (!started_) return;  // Start or Refuse finishes
    }
    // The timer callback may be running: Finish once, through the flag.
    FinishOnce(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }  // ~Timer waits for a running Check

 private:
  void Check() {
    if (entry_.informer->HasSynced()) {
      FinishOnce(grpc::Status::OK, /*fill=*/true);
      return;
    }
    const absl::Time now = service_->clock_->Now();
    if (now >= deadline_) {
      FinishOnce(NotSynced(entry_));
      return;
    }
    MutexLock lock(&mu_);
    if (!finished_) timer_->ArmAt(std::min(deadline_, now + service_->options_.sync_poll_interval));
  }

  // `fill`: answer with the informer's info. The response belongs to the call only until it
  // finishes, so it is written under the same flag that makes Finish happen once.
  void FinishOnce(grpc::Status status, bool fill = false) {
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      timer_->Disarm();
      if (fill) service_->FillInfo(entry_, response_);
      ticket_.Release();
    }
    { MutexLock done(&service_->finished_mu_); }  // see ~InformerService
    Finish(std::move(status));  // the last use of this reactor by the caller
  }

  const InformerService* const service_;
  InformerRegistry::Entry entry_;  // set by Start, before the timer can run
  const absl::Time deadline_;
  v1::InformerInfo* const response_;
  Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  auth::Ticket ticket_ ABSL_GUARDED_BY(mu_);
  // Last: destroyed first, waiting for a running callback while the rest is intact.
  const std::unique_ptr<Timer> timer_;
};

// ---- List: a snapshot of the cache written one batch per message ----

class InformerService::ListReactor : public grpc::ServerWriteReactor<v1::ListResponse> {
 public:
  ListReactor(size_t batch, size_t max_bytes) : batch_(batch), max_bytes_(max_bytes) {}

  // Once the caller is allowed: writes the snapshot.
  void Start(std::vector<ObjectPtr> objects, std::string resource_version, auth::Ticket ticket) {
    objects_ = std::move(objects);
    resource_version_ = std::move(resource_version);
    ticket_ = std::move(ticket);
    WriteNext();
  }

  // gRPC may run each reaction on another of its threads: the reactor's buffers (response_,
  // carry_) change hands through gRPC, which base/tsan.h makes visible to ThreadSanitizer.
  void OnWriteDone(bool ok) override {
    TsanAcquire(this);
    if (!ok) {
      TsanRelease(this);
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    if (next_ >= objects_.size() && carry_ == nullptr) {
      TsanRelease(this);
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext();
  }
  void OnDone() override {
    TsanAcquire(this);
    delete this;
  }

 private:
  // Always at least one message, so that an empty list still reports the resourceVersion. At
  // most batch_ objects and max_bytes_ bytes of them per message, but at least one object.
  void WriteNext() {
    // A new message, not a cleared one: gRPC serialised the last one inside StartWrite, on the
    // thread that called it, after TsanRelease; writing into its buffers here would look like a
    // race (base/tsan.h).
    response_ = v1::ListResponse();
    response_.set_resource_version(resource_version_);
    size_t bytes = 0;
    if (carry_ != nullptr) {
      bytes = carry_->ByteSizeLong();
      response_.mutable_objects()->AddAllocated(carry_.release());
    }
    while (next_ < objects_.size() && static_cast<size_t>(response_.objects_size()) < batch_) {
      v1::Object* object = response_.add_objects();
      ObjectToProto(*objects_[next_], object);
      objects_[next_++].reset();  // copied: let the cache free it if it changed meanwhile
      const size_t size = object->ByteSizeLong();
      if (response_.objects_size() > 1 && bytes + size > max_bytes_) {
        carry_.reset(response_.mutable_objects()->ReleaseLast());  // the next message's first
        break;
      }
      bytes += size;
    }
    TsanRelease(this);
    StartWrite(&response_);
  }

  std::vector<ObjectPtr> objects_;
  std::string resource_version_;
  auth::Ticket ticket_;  // the caller's stream slot, until OnDone
  const size_t batch_;
  const size_t max_bytes_;
  size_t next_ = 0;
  // Converted but over the last message's byte cap.
  std::unique_ptr<v1::Object> carry_;
  v1::ListResponse response_;
};

// ---- Watch: one listener per stream, popped when the stream can take more ----
//
// State machine, under mu_: `busy_` is true while exactly one of these holds — Pump is running,
// the timer is armed to run Pump, or a write is in flight (whose OnWriteDone runs Pump). So at
// most one Pump runs and at most one message is in flight. An idle stream (busy_ false, its last
// Pop found nothing) is woken by the listener's on_ready, by DeleteInformer (Kick) or by
// cancellation. `wake_pending_` records an on_ready that came while busy, so that a Pop that
// found nothing just before it is retried instead of losing the wake-up. Finish is called once,
// only when not busy (nothing in flight, no timer armed); OnDone then removes the listener and
// deletes the reactor.

class InformerService::WatchReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(InformerService* service, v1::WatchRequest request, size_t max_batch,
               size_t max_bytes)
      : service_(service), request_(std::move(request)), id_(request_.informer_id()),
        max_batch_(max_batch), max_bytes_(max_bytes),
        include_old_object_(request_.include_old_object()), namespace_(request_.namespace_()),
        timer_(service->clock_->CreateTimer([this] { Pump(); })) {}

  // The parsed request (the raw one belongs to gRPC).
  const v1::WatchRequest& request() const { return request_; }

  // The informer, and the caller's stream slot, once the caller is allowed (before Start).
  void Admit(std::shared_ptr<informer::SharedInformer> informer, auth::Ticket ticket) {
    informer_ = std::move(informer);
    ticket_ = std::move(ticket);
  }

  // Called once the listener is registered (busy_ is true until then, so nothing pumps early).
  void Start(std::shared_ptr<informer::ProcessorListener> listener) {
    listener_ = std::move(listener);
    Pump();
  }

  // Registration failed before any listener existed.
  void Abort(grpc::Status status) { FinishNow(std::move(status)); }

  // on_ready: with the informer's distribution lock held — only flags and a timer.
  void OnReady() {
    MutexLock lock(&mu_);
    wake_pending_ = true;
    if (busy_ || finished_) return;
    busy_ = true;
    timer_->ArmAt(absl::InfinitePast());
  }

  // The caller lost access (the guard's re-authorization): ends the stream with `status`.
  void Revoke(grpc::Status status) {
    MutexLock lock(&mu_);
    revoked_ = std::move(status);
    if (busy_ || finished_) return;
    busy_ = true;
    timer_->ArmAt(absl::InfinitePast());
  }

  // The informer was deleted.
  void Kick() {
    MutexLock lock(&mu_);
    deleted_ = true;
    if (busy_ || finished_) return;
    busy_ = true;
    timer_->ArmAt(absl::InfinitePast());
  }

  void OnCancel() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      if (busy_ || finished_) return;  // the pump, the timer or OnWriteDone will finish
      busy_ = true;
    }
    FinishNow(grpc::Status::CANCELLED);
  }

  void OnWriteDone(bool ok) override {
    TsanAcquire(this);  // the Pump that started the write may have run on another thread
    if (!ok) {
      MutexLock lock(&mu_);
      cancelled_ = true;
    }
    Pump();
  }

  void OnDone() override {
    TsanAcquire(this);
    service_->RemoveSubscriber(id_, this);
    if (listener_ != nullptr) informer_->RemoveEventHandler(listener_).IgnoreError();
    delete this;  // ~Timer waits for a running Pump (one that just finished the call)
  }

 private:
  // REQUIRES: busy_ is held by this caller.
  void Pump() {
    for (;;) {
      {
        MutexLock lock(&mu_);
        wake_pending_ = false;
      }
      if (Stopping()) return;
      if (carry_.has_value()) {
        writer_.Add(*std::move(carry_));
        carry_.reset();
      } else if (next_ == batch_.size()) {
        batch_.clear();
        next_ = 0;
        if (!listener_->Pop(max_batch_, &batch_, /*wait=*/false)) {
          FinishNow(InformerDeleted(id_));
          return;
        }
      }
      const bool popped = !batch_.empty();
      // Events of the popped batch while they fit in max_bytes_ (at least one per message); the
      // one that does not waits, encoded, for the next message. Encoding an event writes only its
      // few own bytes: the objects' are made once and shared by every stream (watch_encoding.h).
      while (next_ < batch_.size()) {
        if (!namespace_.empty() && !InNamespace(batch_[next_])) {
          ++next_;
          continue;
        }
        EncodedEvent event = EncodeEvent(batch_[next_++], include_old_object_);
        if (writer_.events() > 0 && writer_.bytes() + event.size() > max_bytes_) {
          carry_ = std::move(event);
          break;
        }
        writer_.Add(std::move(event));
      }
      if (!batch_.empty() && next_ == batch_.size()) {
        listener_->Done(batch_);
        batch_.clear();  // drop our references to the objects now that they are copied
        next_ = 0;
      }
      // SYNCED after the last initial object: the listener's HasSynced counts exactly those.
      if (!synced_sent_ && !carry_.has_value() && batch_.empty() && listener_->HasSynced()) {
        writer_.Add(EncodeSynced());
        synced_sent_ = true;
      }
      if (writer_.events() > 0) {
        // A new buffer swapped in, not the last one written into: gRPC took its slices in
        // StartWrite (see ListReactor::WriteNext).
        writer_.Finish(&response_);
        // OnWriteDone (and the next Pump) may run on another thread: base/tsan.h.
        TsanRelease(this);
        StartWrite(&response_);
        return;
      }
      if (popped) continue;  // every event was of other namespaces: there may be more
      MutexLock lock(&mu_);
      if (wake_pending_ || cancelled_ || deleted_ || revoked_.has_value()) continue;
      if (!synced_sent_) {
        // Nothing to pop but not synced yet (e.g. an empty list): look again soon.
        timer_->ArmAt(service_->clock_->Now() + service_->options_.sync_poll_interval);
        return;
      }
      busy_ = false;
      return;
    }
  }

  // Finishes (and returns true) when the client went away or the informer was deleted.
  bool Stopping() {
    bool cancelled, deleted;
    std::optional<grpc::Status> revoked;
    {
      MutexLock lock(&mu_);
      cancelled = cancelled_;
      deleted = deleted_;
      revoked = revoked_;
    }
    if (revoked.has_value()) {
      FinishNow(*std::move(revoked));
      return true;
    }
    if (cancelled) {
      FinishNow(grpc::Status::CANCELLED);
      return true;
    }
    if (deleted) {
      FinishNow(InformerDeleted(id_));
      return true;
    }
    return false;
  }

  void FinishNow(grpc::Status status) {
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    TsanRelease(this);  // OnDone, on a gRPC thread, deletes the buffers
    Finish(std::move(status));  // the last use of this reactor by the caller
  }

  // Whether the notification concerns namespace_ (a resnapshot concerns every namespace).
  bool InNamespace(const Notification& n) const {
    if (n.type == Notification::Type::kResnapshot) return true;
    const ObjectPtr& o = n.object != nullptr ? n.object : n.old_object;
    return o != nullptr && o->namespace_name() == namespace_;
  }

  InformerService* const service_;
  const v1::WatchRequest request_;
  const std::string id_;
  std::shared_ptr<informer::SharedInformer> informer_;  // set once by Admit
  auth::Ticket ticket_;  // the caller's stream slot, until the reactor goes
  const size_t max_batch_;
  const size_t max_bytes_;
  const bool include_old_object_;
  const std::string namespace_;  // "" for all
  std::shared_ptr<informer::ProcessorListener> listener_;  // set once by Start

  // Used only by the one running Pump: the last popped notifications, those before next_
  // encoded (and Done once all are); an event encoded but over the last message's byte cap; the
  // message being assembled and the last one written.
  std::vector<Notification> batch_;
  size_t next_ = 0;
  std::optional<EncodedEvent> carry_;
  WatchResponseWriter writer_;
  grpc::ByteBuffer response_;
  bool synced_sent_ = false;

  Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = true;
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool deleted_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> revoked_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Last: destroyed first, waiting for a running Pump while the rest is intact.
  const std::unique_ptr<Timer> timer_;
};

// ---- the service ----

InformerService::InformerService(InformerRegistry* informers, InformerServiceOptions options)
    : informers_(informers), options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      lanes_(std::make_unique<ApiCallLanes>(
          ApiCallLanes::Options{.clock = clock_,
                                .max_wait = options_.api_call_max_wait,
                                .resolve = [informers](absl::string_view cluster) {
                                  return informers->ResolveCluster(cluster);
                                }})) {}

InformerService::~InformerService() {
  // Every reactor's last use of the service (and of the registry behind it) ends with a pass
  // through finished_mu_ before its Finish; the server's Shutdown, which returned before this,
  // waited for those Finishes inside uninstrumented libgrpc. Taking the lock here makes that
  // order visible to ThreadSanitizer too.
  MutexLock lock(&finished_mu_);
}

size_t InformerService::api_call_lanes() const { return lanes_->lanes(); }

size_t InformerService::subscribers(absl::string_view id) const {
  MutexLock lock(&mu_);
  auto it = subscribers_.find(id);
  return it == subscribers_.end() ? 0 : it->second.reactors.size();
}

void InformerService::FillInfo(const InformerRegistry::Entry& entry, v1::InformerInfo* info) const {
  info->set_id(entry.id);
  *info->mutable_spec() = entry.spec;
  v1::InformerState* state = info->mutable_state();
  const informer::SharedInformer& inf = *entry.informer;
  state->set_synced(inf.HasSynced());
  info->set_namespaced(entry.namespaced);
  info->set_kind(entry.spec.kind());
  info->set_last_used_unix_ms(absl::ToUnixMillis(entry.last_used()));
  info->set_pinned(entry.pinned());
  const informer::ReflectorStatus status = inf.reflector_status();
  const auto [reflector, reflector_name] = ReflectorStateNames(status.state);
  state->set_reflector(reflector);
  state->set_reflector_state(std::string(reflector_name));
  state->set_last_sync_resource_version(status.last_sync_resource_version);
  if (!status.last_error.ok()) {
    state->set_last_error(client::DescribeStatus(status.last_error));
    state->set_last_error_unix_ms(absl::ToUnixMillis(status.last_error_time));
  }
  const informer::MemoryUsage usage = inf.store().memory();
  state->set_objects(usage.objects);
  state->set_bytes(usage.bytes);
  state->set_subscribers(static_cast<uint32_t>(subscribers(entry.id)));
  state->set_lists(status.list_requests);
  state->set_watches(status.watches_started);
  state->set_events(status.events);
}

void InformerService::RevokeWatch(const std::string& id, WatchReactor* reactor,
                                  const absl::Status& status) {
  MutexLock lock(&mu_);
  auto it = subscribers_.find(id);
  if (it != subscribers_.end() && it->second.reactors.contains(reactor)) {
    reactor->Revoke(ToGrpc(status));
  }
}

void InformerService::RemoveSubscriber(const std::string& id, WatchReactor* reactor) {
  MutexLock lock(&mu_);
  auto it = subscribers_.find(id);
  if (it == subscribers_.end()) return;
  Subscribers& subs = it->second;
  auto r = subs.reactors.find(reactor);
  if (r == subs.reactors.end()) return;
  if (const auth::Principal* p = r->second; p != nullptr) {
    auto count = subs.per_principal.find(p);
    if (--count->second == 0) subs.per_principal.erase(count);
  }
  subs.reactors.erase(r);
  --total_subscribers_;
  if (subs.reactors.empty()) subscribers_.erase(it);
}

grpc::ServerUnaryReactor* InformerService::EnsureInformer(grpc::CallbackServerContext* context,
                                                          const v1::EnsureInformerRequest* request,
                                                          v1::InformerInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!request->has_spec()) return Answer(reactor, InvalidArgument("spec", "required"));
  // Everything that needs no API server is checked here, before the call takes a lane: a spec
  // that names no configured cluster, or is malformed, costs no thread and is kept nowhere.
  absl::StatusOr<std::string> cluster = informers_->Check(request->spec());
  if (!cluster.ok()) return Answer(reactor, ToGrpc(cluster.status()));
  // The resource may need discovery before it can be authorized: the caller is authenticated
  // here and authorized on the lane, where waiting on the API server is allowed.
  auth::CheckCall(
      options_.guard, context, auth::CallKind::kUnary, auth::Need({}), reactor,
      [this, context, reactor, request, response, cluster = *cluster](auth::Ticket ticket) {
        // Discovery may wait on the API server: never on a gRPC thread (api_call_lanes.h).
        lanes_->Run<v1::InformerInfo>(
            context, reactor, response, cluster,
            [this, spec = request->spec(), cluster,
             ticket = std::move(ticket)]() -> absl::StatusOr<v1::InformerInfo> {
              InformerRegistry::Admission admit;
              std::string admitted;  // the id the caller was given a place for, if any
              if (options_.guard != nullptr) {
                admit = AdmitFor(ticket.caller(), spec, cluster, &admitted);
              }
              absl::StatusOr<InformerRegistry::Entry> entry = informers_->Ensure(spec, admit);
              if (!admitted.empty()) {
                options_.guard->FinishInformer(ticket.caller(), admitted, entry.ok());
              }
              if (!entry.ok()) return entry.status();
              v1::InformerInfo info;
              FillInfo(*entry, &info);
              return info;
            });
      });
  return reactor;
}

InformerRegistry::Admission InformerService::AdmitFor(auth::Caller* caller,
                                                      const v1::InformerSpec& spec,
                                                      const std::string& cluster,
                                                      std::string* admitted) const {
  return [this, caller, admitted, ns = spec.namespace_(), cluster](
             const client::ResourceInfo& resource, const std::string& id,
             bool exists) -> absl::Status {
    const InformerRegistry::Scope scope{.cluster = cluster,
                                        .group = resource.gvr.group,
                                        .version = resource.gvr.version,
                                        .resource = resource.gvr.resource,
                                        .namespace_name = ns,
                                        .namespaced = resource.namespaced};
    if (absl::Status s = options_.guard->Authorize(caller, InformerRead(scope, "")); !s.ok()) {
      return s;
    }
    if (exists) return absl::OkStatus();
    absl::Status s = options_.guard->AdmitInformer(
        caller, id, [this](const std::string& x) { return informers_->GetScope(x).ok(); });
    if (s.ok()) *admitted = id;
    return s;
  };
}

grpc::ServerUnaryReactor* InformerService::DeleteInformer(grpc::CallbackServerContext* context,
                                                          const v1::DeleteInformerRequest* request,
                                                          v1::DeleteInformerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status s = CheckId(request->informer_id()); !s.ok()) return Answer(reactor, s);
  auth::RequirementFn need = [this, id = request->informer_id()]()
      -> absl::StatusOr<auth::Requirement> {
    absl::StatusOr<auth::Requirement> r = InformerRead(*informers_, id, "");
    if (!r.ok()) return r;
    r->any_of[0].push_back(auth::Attributes{.verb = "delete",
                                            .group = std::string(auth::kApiGroup),
                                            .version = "v1",
                                            .resource = "informers",
                                            .name = id});
    return r;
  };
  auth::CheckCall(options_.guard, context, auth::CallKind::kUnary, std::move(need), reactor,
                  [this, reactor, request](auth::Ticket) {
                    if (absl::Status s = informers_->Delete(request->informer_id()); !s.ok()) {
                      Answer(reactor, ToGrpc(s));
                      return;
                    }
                    // Its listeners are stopped; wake the idle streams so that they end now.
                    {
                      MutexLock lock(&mu_);
                      if (auto it = subscribers_.find(request->informer_id());
                          it != subscribers_.end()) {
                        for (const auto& [w, principal] : it->second.reactors) w->Kick();
                      }
                    }
                    Answer(reactor, grpc::Status::OK);
                  });
  return reactor;
}

grpc::ServerUnaryReactor* InformerService::GetInformer(grpc::CallbackServerContext* context,
                                                       const v1::GetInformerRequest* request,
                                                       v1::InformerInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status s = CheckId(request->informer_id()); !s.ok()) return Answer(reactor, s);
  auth::CheckCall(options_.guard, context, auth::CallKind::kUnary,
                  NeedInformerRead(informers_, request->informer_id(), ""), reactor,
                  [this, reactor, request, response](auth::Ticket) {
                    absl::StatusOr<InformerRegistry::Entry> entry =
                        informers_->Get(request->informer_id());
                    if (!entry.ok()) {
                      Answer(reactor, ToGrpc(entry.status()));
                      return;
                    }
                    FillInfo(*entry, response);
                    Answer(reactor, grpc::Status::OK);
                  });
  return reactor;
}

grpc::ServerUnaryReactor* InformerService::WaitForSync(grpc::CallbackServerContext* context,
                                                       const v1::WaitForSyncRequest* request,
                                                       v1::InformerInfo* response) {
  if (grpc::Status s = CheckId(request->informer_id()); !s.ok()) {
    return Answer(context->DefaultReactor(), s);
  }
  if (request->timeout_ms() < 0) {
    return Answer(context->DefaultReactor(), InvalidArgument("timeout_ms", "negative"));
  }
  absl::Time deadline = absl::FromChrono(context->deadline());
  if (request->timeout_ms() > 0) {
    deadline = std::min(deadline, clock_->Now() + absl::Milliseconds(request->timeout_ms()));
  }
  auto* reactor = new WaitForSyncReactor(this, deadline, response);
  auth::CheckCall(
      options_.guard, context, auth::CallKind::kUnary,
      NeedInformerRead(informers_, request->informer_id(), ""),
      [this, reactor, request](auth::Ticket ticket) {
        reactor->Start(informers_->Get(request->informer_id()), std::move(ticket));
      },
      [reactor](const absl::Status& s) { reactor->Refuse(ToGrpc(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* InformerService::Get(grpc::CallbackServerContext* context,
                                               const v1::GetRequest* request,
                                               v1::GetResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status s = CheckId(request->informer_id()); !s.ok()) return Answer(reactor, s);
  if (request->key().empty()) return Answer(reactor, InvalidArgument("key", "required"));
  auth::CheckCall(
      options_.guard, context, auth::CallKind::kUnary,
      NeedInformerRead(informers_, request->informer_id(), KeyNamespace(request->key())),
      reactor, [this, reactor, request, response](auth::Ticket) {
        std::shared_ptr<informer::SharedInformer> informer =
            informers_->Find(request->informer_id());
        if (informer == nullptr) {
          Answer(reactor, ToGrpc(InformerNotFound(request->informer_id())));
          return;
        }
        const informer::GetResult got = informer->lister().Get(request->key());
        response->set_found(got.object != nullptr);
        if (got.object != nullptr) ObjectToProto(*got.object, response->mutable_object());
        response->set_resource_version(got.resource_version);
        Answer(reactor, grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerWriteReactor<v1::ListResponse>* InformerService::List(
    grpc::CallbackServerContext* context, const v1::ListRequest* request) {
  using R = v1::ListResponse;
  if (grpc::Status s = CheckId(request->informer_id()); !s.ok()) return Fail<R>(s);
  absl::StatusOr<informer::LabelSelector> labels =
      informer::LabelSelector::Parse(request->label_selector());
  if (!labels.ok()) return Fail<R>(InvalidArgument("label_selector", labels.status().message()));
  absl::StatusOr<informer::FieldSelector> fields =
      informer::FieldSelector::Parse(request->field_selector());
  if (!fields.ok()) return Fail<R>(InvalidArgument("field_selector", fields.status().message()));
  if (request->index_name().empty() != request->index_value().empty()) {
    return Fail<R>(request->index_name().empty()
                       ? InvalidArgument("index_name", "required with index_value")
                       : InvalidArgument("index_value", "required with index_name"));
  }
  if (request->batch_size() > kMaxListBatch) {
    return Fail<R>(InvalidArgument("batch_size", absl::StrCat("at most ", kMaxListBatch)));
  }
  if (grpc::Status s = CheckMaxBatchBytes(request->max_batch_bytes()); !s.ok()) return Fail<R>(s);
  uint32_t batch = request->batch_size() == 0 ? kDefaultListBatch : request->batch_size();
  batch = std::min(batch, std::max<uint32_t>(options_.max_batch, 1));
  auto* reactor = new ListReactor(batch, MaxBatchBytes(request->max_batch_bytes()));
  auth::CheckCall(
      options_.guard, context, auth::CallKind::kStream,
      NeedInformerRead(informers_, request->informer_id(), request->namespace_()), reactor,
      [this, reactor, request, labels = *std::move(labels),
       fields = *std::move(fields)](auth::Ticket ticket) {
        std::shared_ptr<informer::SharedInformer> informer =
            informers_->Find(request->informer_id());
        if (informer == nullptr) {
          reactor->Finish(ToGrpc(InformerNotFound(request->informer_id())));
          return;
        }
        informer::ListResult result;
        if (!request->index_name().empty()) {
          absl::StatusOr<informer::ListResult> indexed =
              informer->store().ByIndex(request->index_name(), request->index_value());
          if (!indexed.ok()) {
            reactor->Finish(InvalidArgument("index_name", indexed.status().message()));
            return;
          }
          result = *std::move(indexed);
          const std::string& ns = request->namespace_();
          std::erase_if(result.objects, [&](const ObjectPtr& o) {
            return (!ns.empty() && o->namespace_name() != ns) || !labels.Matches(*o) ||
                   !fields.Matches(*o);
          });
        } else if (!request->namespace_().empty()) {
          result = informer->lister().ListNamespace(request->namespace_(), labels, fields);
        } else {
          result = informer->lister().List(labels, fields);
        }
        reactor->Start(std::move(result.objects), std::move(result.resource_version),
                       std::move(ticket));
      });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InformerService::Watch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  using R = grpc::ByteBuffer;
  v1::WatchRequest request;
  if (absl::Status s = ParseRawRequest(*raw, &request); !s.ok()) return Fail<R>(ToGrpc(s));
  const std::string& id = request.informer_id();
  if (grpc::Status s = CheckId(id); !s.ok()) return Fail<R>(s);
  if (request.buffer_size() > options_.max_buffer_size) {
    return Fail<R>(InvalidArgument("buffer_size", absl::StrCat("at most ", options_.max_buffer_size)));
  }
  if (grpc::Status s = CheckMaxBatchBytes(request.max_batch_bytes()); !s.ok()) return Fail<R>(s);
  uint32_t max_batch = request.max_batch() == 0 ? kDefaultWatchBatch : request.max_batch();
  max_batch = std::min(max_batch, std::max<uint32_t>(options_.max_batch, 1));
  const size_t max_bytes = MaxBatchBytes(request.max_batch_bytes());
  auto* reactor = new WatchReactor(this, std::move(request), max_batch, max_bytes);
  const v1::WatchRequest& kept = reactor->request();  // lives as long as the reactor
  auth::CheckCall(
      options_.guard, context, auth::CallKind::kStream,
      NeedInformerRead(informers_, kept.informer_id(), kept.namespace_()),
      [this, reactor](auth::Ticket ticket) {
        StartWatch(reactor, reactor->request(), std::move(ticket));
      },
      [reactor](const absl::Status& s) { reactor->Abort(ToGrpc(s)); });
  return reactor;
}

void InformerService::StartWatch(WatchReactor* reactor, const v1::WatchRequest& request,
                                 auth::Ticket ticket) {
  const std::string& id = request.informer_id();
  std::shared_ptr<informer::SharedInformer> informer = informers_->Find(id);
  if (informer == nullptr) {
    reactor->Abort(ToGrpc(InformerNotFound(id)));
    return;
  }
  uint64_t n = 0;
  absl::Status exhausted;  // why the stream is refused, if it is
  // Without authentication (or checks) every call is one tenant's: no share per principal.
  const auth::Principal* principal =
      options_.guard != nullptr && !options_.guard->insecure() && ticket.caller() != nullptr
          ? ticket.caller()->principal.get()
          : nullptr;
  {
    MutexLock lock(&mu_);
    Subscribers& subs = subscribers_[id];
    const bool per_informer = subs.reactors.size() >= options_.max_subscribers_per_informer;
    size_t* held = principal != nullptr ? &subs.per_principal[principal] : nullptr;
    if (held != nullptr && *held >= options_.max_subscribers_per_principal_per_informer) {
      const size_t limit = options_.max_subscribers_per_principal_per_informer;
      exhausted = Error(absl::StatusCode::kResourceExhausted, v1::SUBSCRIBER_LIMIT,
                        absl::StrCat(ticket.caller()->Describe(), " has its maximum of ", limit,
                                     " watchers of informer ", id,
                                     " (callerLimits.watchersPerInformer; the informer's other "
                                     "watchers are for other callers)"),
                        {{"informer_id", id},
                         {"limit", absl::StrCat(limit)},
                         {"scope", "caller"}});
    } else if (per_informer || total_subscribers_ >= options_.max_subscribers) {
      const size_t limit =
          per_informer ? options_.max_subscribers_per_informer : options_.max_subscribers;
      exhausted = Error(
          absl::StatusCode::kResourceExhausted, v1::SUBSCRIBER_LIMIT,
          per_informer ? absl::StrCat("informer ", id, " has its maximum of ", limit, " watchers")
                       : absl::StrCat("the server has its maximum of ", limit, " watchers"),
          {{"informer_id", id},
           {"limit", absl::StrCat(limit)},
           {"scope", per_informer ? "informer" : "server"}});
    }
    if (exhausted.ok()) {
      subs.reactors.emplace(reactor, principal);
      if (held != nullptr) ++*held;
      ++total_subscribers_;
      n = ++watches_started_;
    } else {
      if (held != nullptr && *held == 0) subs.per_principal.erase(principal);
      if (subs.reactors.empty()) subscribers_.erase(id);
    }
  }
  if (!exhausted.ok()) {
    // Outside the lock: OnDone (RemoveSubscriber) may run as soon as the call finishes.
    reactor->Abort(ToGrpc(exhausted));
    return;
  }
  // Registered: a revocation finds the reactor among the subscribers while it lives.
  ticket.OnRevoked([this, id, reactor](const absl::Status& s) { RevokeWatch(id, reactor, s); });
  reactor->Admit(informer, std::move(ticket));
  absl::StatusOr<std::shared_ptr<informer::ProcessorListener>> listener = informer->AddListener(
      {.name = absl::StrCat("watch-", n),
       .buffer_size = request.buffer_size() == 0 ? kDefaultWatchBuffer : request.buffer_size(),
       .buffer_bytes = options_.max_buffer_bytes,
       .on_ready = [reactor] { reactor->OnReady(); }});
  if (!listener.ok()) {
    // Stopped meanwhile (deleted): OnDone unregisters the reactor.
    reactor->Abort(InformerDeleted(id));
    return;
  }
  reactor->Start(*std::move(listener));
}

}  // namespace informerd::service
