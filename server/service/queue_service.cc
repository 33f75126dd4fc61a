#include "server/service/queue_service.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::service {
namespace {

void Reply(grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
  reactor->Finish(ToGrpc(status));
}

absl::StatusOr<std::shared_ptr<NamedQueue>> FindQueue(QueueRegistry* queues,
                                                      const std::string& name) {
  if (name.empty()) return InvalidField("queue", "required");
  return queues->Get(name);
}

// Every key valid and the batch within bounds; else INVALID_ARGUMENT naming the first bad one.
absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  if (keys.size() > kMaxKeysPerRequest) {
    return InvalidField("keys",
                        absl::StrCat(keys.size(), " keys, at most ", kMaxKeysPerRequest,
                                     " per request"));
  }
  for (int i = 0; i < keys.size(); ++i) {
    if (std::string why = InvalidKeyReason(keys[i]); !why.empty()) {
      return InvalidField(absl::StrCat("keys[", i, "]"), why);
    }
  }
  return absl::OkStatus();
}

// The queue a keyed call names, once its keys are valid.
absl::StatusOr<std::shared_ptr<NamedQueue>> FindQueueForKeys(
    QueueRegistry* queues, const std::string& name,
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  auto q = FindQueue(queues, name);
  if (!q.ok()) return q.status();
  if (absl::Status s = ValidateKeys(keys); !s.ok()) return s;
  return q;
}

}  // namespace

QueueService::QueueService(QueueRegistry* queues, absl::Duration api_call_max_wait,
                           auth::Guard* guard, const InformerRegistry* informers)
    : queues_(queues),
      guard_(guard),
      informers_(informers),
      poller_([this] { PollDrains(); }),
      lanes_({.max_wait = api_call_max_wait}) {}

QueueService::~QueueService() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  poller_.join();
}

void QueueService::PollDrains() {
  for (;;) {
    std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> answers;
    bool stopping;
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithDeadline([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; },
                            absl::Now() + absl::Milliseconds(20));
      stopping = stopping_;
      std::vector<PendingDrain> waiting;
      for (PendingDrain& d : drains_) {
        if (stopping) {
          answers.emplace_back(d.reactor, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                       "informerd is shutting down"));
        } else if (d.context->IsCancelled()) {
          // The caller gave up or its deadline passed (gRPC cancels the call then).
          answers.emplace_back(d.reactor, grpc::Status::CANCELLED);
        } else if (d.queue->ShutDownAndDrain(absl::InfinitePast()) || d.queue->closed()) {
          answers.emplace_back(d.reactor, grpc::Status::OK);
        } else {
          waiting.push_back(std::move(d));
        }
      }
      drains_.swap(waiting);
    }
    // Answered outside the lock: Finish may run the call's completion inline.
    for (auto& [reactor, status] : answers) reactor->Finish(status);
    if (!answers.empty()) {
      MutexLock lock(&mu_);
      unanswered_drains_ -= answers.size();
    }
    if (stopping) return;
  }
}

namespace {

// The cluster whose discovery creating or updating a queue with `spec` may wait on: that of
// its first owner source (owner kinds are resolved when the queue is built), if any.
std::optional<std::string> DiscoveryCluster(const QueueRegistry& queues, const v1::QueueSpec& spec) {
  for (const v1::QueueSource& src : spec.sources()) {
    if (src.map_to_case() != v1::QueueSource::kOwner) continue;
    std::optional<SourceInformer> inf = queues.lookups().informer(src.informer_id());
    return inf.has_value() ? inf->cluster : "";
  }
  return std::nullopt;
}

}  // namespace

template <typename Body>
grpc::ServerUnaryReactor* QueueService::Guarded(grpc::CallbackServerContext* context,
                                                auth::RequirementFn need, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auth::CheckCall(guard_, context, auth::CallKind::kUnary, std::move(need), reactor,
                  [reactor, body = std::move(body)](auth::Ticket ticket) mutable {
                    body(reactor, std::move(ticket));
                  });
  return reactor;
}

auth::RequirementFn QueueService::Need(std::string verb, const std::string& queue,
                                       const v1::QueueSpec* spec) const {
  if (informers_ == nullptr) spec = nullptr;  // no informer to look sources up in
  return NeedQueue(informers_, std::move(verb), queue, spec);
}

grpc::ServerUnaryReactor* QueueService::CreateQueue(grpc::CallbackServerContext* context,
                                                    const v1::CreateQueueRequest* request,
                                                    v1::QueueInfo* response) {
  return Guarded(context, Need("create", request->spec().name(), &request->spec()),
                 [this, context, request, response](grpc::ServerUnaryReactor* reactor,
                                                    auth::Ticket ticket) {
                   Apply(context, reactor, response, request->spec(), std::move(ticket),
                         [this](const v1::QueueSpec& spec) { return queues_->Create(spec); });
                 });
}

grpc::ServerUnaryReactor* QueueService::UpdateQueue(grpc::CallbackServerContext* context,
                                                    const v1::UpdateQueueRequest* request,
                                                    v1::QueueInfo* response) {
  auth::RequirementFn need = Need("update", request->spec().name(), &request->spec());
  if (request->allow_missing()) {
    // An update that creates the queue needs create too, as kube-apiserver asks of an update
    // that creates an object.
    need = [this, update = std::move(need),
            name = request->spec().name()]() mutable -> absl::StatusOr<auth::Requirement> {
      absl::StatusOr<auth::Requirement> r = update();
      if (r.ok() && !queues_->Get(name).ok()) {
        r->any_of[0].push_back(auth::QueueAttributes("create", name));
      }
      return r;
    };
  }
  return Guarded(
      context, std::move(need),
      [this, context, request, response](grpc::ServerUnaryReactor* reactor, auth::Ticket ticket) {
        Apply(context, reactor, response, request->spec(), std::move(ticket),
              [this, allow_missing = request->allow_missing()](const v1::QueueSpec& spec) {
                return queues_->Update(spec, allow_missing);
              });
      });
}

void QueueService::Apply(
    grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
    v1::QueueInfo* response, const v1::QueueSpec& spec, auth::Ticket ticket,
    std::function<absl::StatusOr<std::shared_ptr<NamedQueue>>(const v1::QueueSpec&)> change) {
  auto info = [this, change = std::move(change), spec,
               ticket = std::move(ticket)]() -> absl::StatusOr<v1::QueueInfo> {
    bool admitted = false;
    if (guard_ != nullptr && !spec.name().empty() && !queues_->Get(spec.name()).ok()) {
      // A new queue: within the caller's limit of queues created (its place taken now, so that
      // creations at once cannot all take the last one).
      if (absl::Status s = guard_->AdmitQueue(
              ticket.caller(), spec.name(),
              [this](const std::string& q) { return queues_->Get(q).ok(); });
          !s.ok()) {
        return s;
      }
      admitted = true;
    }
    auto q = change(spec);
    if (admitted) guard_->FinishQueue(ticket.caller(), spec.name(), q.ok());
    if (!q.ok()) return q.status();
    v1::QueueInfo out;
    *out.mutable_spec() = (*q)->spec();
    *out.mutable_state() = (*q)->State();
    return out;
  };
  std::optional<std::string> cluster = DiscoveryCluster(*queues_, spec);
  // A replica set's leader writes the spec through to the cluster's store: the default cluster.
  if (!cluster.has_value() && queues_->persists()) cluster = "";
  if (cluster.has_value()) {
    lanes_.Run<v1::QueueInfo>(context, reactor, response, *cluster, std::move(info));
    return;
  }
  // Nothing to ask an API server: answered here.
  absl::StatusOr<v1::QueueInfo> result = info();
  if (result.ok()) *response = *std::move(result);
  Reply(reactor, result.status());
}

grpc::ServerUnaryReactor* QueueService::DeleteQueue(grpc::CallbackServerContext* context,
                                                    const v1::DeleteQueueRequest* request,
                                                    v1::DeleteQueueResponse* response) {
  if (request->queue().empty()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    Reply(reactor, InvalidField("queue", "required"));
    return reactor;
  }
  return Guarded(context, Need("delete", request->queue()),
                 [this, context, request, response](grpc::ServerUnaryReactor* reactor,
                                                    auth::Ticket) {
                   if (!queues_->persists()) {
                     Reply(reactor, queues_->Delete(request->queue()));
                     return;
                   }
                   // The stored spec is removed first, on the default cluster's lane.
                   lanes_.Run<v1::DeleteQueueResponse>(
                       context, reactor, response, "",
                       [this, queue = request->queue()]()
                           -> absl::StatusOr<v1::DeleteQueueResponse> {
                         if (absl::Status s = queues_->Delete(queue); !s.ok()) return s;
                         return v1::DeleteQueueResponse();
                       });
                 });
}

grpc::ServerUnaryReactor* QueueService::GetQueue(grpc::CallbackServerContext* context,
                                                 const v1::GetQueueRequest* request,
                                                 v1::QueueInfo* response) {
  return Guarded(context, Need("get", request->queue()),
                 [this, request, response](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueue(queues_, request->queue());
                   if (q.ok()) {
                     *response->mutable_spec() = (*q)->spec();
                     *response->mutable_state() = (*q)->State();
                   }
                   Reply(reactor, q.status());
                 });
}

grpc::ServerUnaryReactor* QueueService::Add(grpc::CallbackServerContext* context,
                                            const v1::AddRequest* request,
                                            v1::AddResponse* response) {
  return Guarded(context, Need("update", request->queue()),
                 [this, request](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueueForKeys(queues_, request->queue(), request->keys());
                   if (!q.ok()) return Reply(reactor, q.status());
                   if (absl::Status s = ValidatePriority(request->priority(), "priority");
                       !s.ok()) {
                     return Reply(reactor, s);
                   }
                   Reply(reactor, (*q)->Add(request->keys(), request->priority()));
                 });
}

grpc::ServerUnaryReactor* QueueService::AddAfter(grpc::CallbackServerContext* context,
                                                 const v1::AddAfterRequest* request,
                                                 v1::AddResponse* response) {
  return Guarded(
      context, Need("update", request->queue()),
      [this, request](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
        auto q = FindQueueForKeys(queues_, request->queue(), request->keys());
        if (!q.ok()) return Reply(reactor, q.status());
        if (request->delay_ms() < 0 || request->delay_ms() > kMaxDelayMs) {
          return Reply(reactor,
                       InvalidField("delay_ms", absl::StrCat("must be in 0..", kMaxDelayMs,
                                                             ", got ", request->delay_ms())));
        }
        if (absl::Status s = ValidatePriority(request->priority(), "priority"); !s.ok()) {
          return Reply(reactor, s);
        }
        Reply(reactor, (*q)->AddAfter(request->keys(), absl::Milliseconds(request->delay_ms()),
                                      request->priority()));
      });
}

grpc::ServerUnaryReactor* QueueService::AddRateLimited(grpc::CallbackServerContext* context,
                                                       const v1::AddRateLimitedRequest* request,
                                                       v1::AddResponse* response) {
  return Guarded(context, Need("update", request->queue()),
                 [this, request](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueueForKeys(queues_, request->queue(), request->keys());
                   if (!q.ok()) return Reply(reactor, q.status());
                   if (absl::Status s = ValidatePriority(request->priority(), "priority");
                       !s.ok()) {
                     return Reply(reactor, s);
                   }
                   Reply(reactor, (*q)->AddRateLimited(request->keys(), request->priority()));
                 });
}

grpc::ServerUnaryReactor* QueueService::Forget(grpc::CallbackServerContext* context,
                                               const v1::ForgetRequest* request,
                                               v1::ForgetResponse* response) {
  return Guarded(context, Need("update", request->queue()),
                 [this, request](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueueForKeys(queues_, request->queue(), request->keys());
                   if (!q.ok()) return Reply(reactor, q.status());
                   (*q)->Forget(request->keys());
                   Reply(reactor, absl::OkStatus());
                 });
}

grpc::ServerUnaryReactor* QueueService::NumRequeues(grpc::CallbackServerContext* context,
                                                    const v1::NumRequeuesRequest* request,
                                                    v1::NumRequeuesResponse* response) {
  return Guarded(context, Need("get", request->queue()),
                 [this, request, response](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueue(queues_, request->queue());
                   if (!q.ok()) return Reply(reactor, q.status());
                   if (std::string why = InvalidKeyReason(request->key()); !why.empty()) {
                     return Reply(reactor, InvalidField("key", why));
                   }
                   response->set_requeues((*q)->NumRequeues(request->key()));
                   Reply(reactor, absl::OkStatus());
                 });
}

grpc::ServerUnaryReactor* QueueService::Len(grpc::CallbackServerContext* context,
                                            const v1::LenRequest* request,
                                            v1::LenResponse* response) {
  return Guarded(context, Need("get", request->queue()),
                 [this, request, response](grpc::ServerUnaryReactor* reactor, auth::Ticket) {
                   auto q = FindQueue(queues_, request->queue());
                   if (!q.ok()) return Reply(reactor, q.status());
                   response->set_len((*q)->Len());
                   Reply(reactor, absl::OkStatus());
                 });
}

grpc::ServerUnaryReactor* QueueService::ShutDown(grpc::CallbackServerContext* context,
                                                 const v1::ShutDownRequest* request,
                                                 v1::ShutDownResponse* response) {
  return Guarded(
      context, Need("update", request->queue()),
      [this, context, request](grpc::ServerUnaryReactor* reactor, auth::Ticket ticket) {
        auto q = FindQueue(queues_, request->queue());
        if (!q.ok()) return Reply(reactor, q.status());
        (*q)->ShutDown();
        if (!request->drain()) return Reply(reactor, absl::OkStatus());
        // The drain may take as long as the slowest worker: the poller answers it (see the
        // header). The caller's in-flight slot is held until then.
        MutexLock lock(&mu_);
        drains_.push_back({*std::move(q), context, reactor, std::move(ticket)});
        ++unanswered_drains_;
      });
}

size_t QueueService::UnansweredDrains() const {
  MutexLock lock(&mu_);
  return unanswered_drains_;
}

}  // namespace informerd::service
