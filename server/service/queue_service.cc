#include "server/service/queue_service.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::service {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
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


}  // namespace

QueueService::QueueService(QueueRegistry* queues, absl::Duration api_call_max_wait)
    : queues_(queues),
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

grpc::ServerUnaryReactor* QueueService::CreateQueue(grpc::CallbackServerContext* context,
                                                    const v1::CreateQueueRequest* request,
                                                    v1::QueueInfo* response) {
  return Apply(context, response, request->spec(),
               [this](const v1::QueueSpec& spec) { return queues_->Create(spec); });
}

grpc::ServerUnaryReactor* QueueService::UpdateQueue(grpc::CallbackServerContext* context,
                                                    const v1::UpdateQueueRequest* request,
                                                    v1::QueueInfo* response) {
  return Apply(context, response, request->spec(),
               [this, allow_missing = request->allow_missing()](const v1::QueueSpec& spec) {
                 return queues_->Update(spec, allow_missing);
               });
}

grpc::ServerUnaryReactor* QueueService::Apply(
    grpc::CallbackServerContext* context, v1::QueueInfo* response, const v1::QueueSpec& spec,
    std::function<absl::StatusOr<std::shared_ptr<NamedQueue>>(const v1::QueueSpec&)> change) {
  auto info = [change = std::move(change), spec]() -> absl::StatusOr<v1::QueueInfo> {
    auto q = change(spec);
    if (!q.ok()) return q.status();
    v1::QueueInfo out;
    *out.mutable_spec() = (*q)->spec();
    *out.mutable_state() = (*q)->State();
    return out;
  };
  std::optional<std::string> cluster = DiscoveryCluster(*queues_, spec);
  if (cluster.has_value()) {
    return lanes_.Run<v1::QueueInfo>(context, response, *cluster, std::move(info));
  }
  // Nothing to ask an API server: answered here.
  absl::StatusOr<v1::QueueInfo> result = info();
  if (result.ok()) *response = *std::move(result);
  return Reply(context, result.status());
}

grpc::ServerUnaryReactor* QueueService::DeleteQueue(grpc::CallbackServerContext* context,
                                                    const v1::DeleteQueueRequest* request,
                                                    v1::DeleteQueueResponse* response) {
  if (request->queue().empty()) return Reply(context, InvalidField("queue", "required"));
  return Reply(context, queues_->Delete(request->queue()));
}

grpc::ServerUnaryReactor* QueueService::GetQueue(grpc::CallbackServerContext* context,
                                                 const v1::GetQueueRequest* request,
                                                 v1::QueueInfo* response) {
  auto q = FindQueue(queues_, request->queue());
  if (q.ok()) {
    *response->mutable_spec() = (*q)->spec();
    *response->mutable_state() = (*q)->State();
  }
  return Reply(context, q.status());
}

grpc::ServerUnaryReactor* QueueService::Add(grpc::CallbackServerContext* context,
                                            const v1::AddRequest* request,
                                            v1::AddResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return Reply(context, s);
  return Reply(context, (*q)->Add(request->keys()));
}

grpc::ServerUnaryReactor* QueueService::AddAfter(grpc::CallbackServerContext* context,
                                                 const v1::AddAfterRequest* request,
                                                 v1::AddResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return Reply(context, s);
  if (request->delay_ms() < 0 || request->delay_ms() > kMaxDelayMs) {
    return Reply(context, InvalidField("delay_ms", absl::StrCat("must be in 0..", kMaxDelayMs,
                                                                 ", got ", request->delay_ms())));
  }
  return Reply(context,
               (*q)->AddAfter(request->keys(), absl::Milliseconds(request->delay_ms())));
}

grpc::ServerUnaryReactor* QueueService::AddRateLimited(grpc::CallbackServerContext* context,
                                                       const v1::AddRateLimitedRequest* request,
                                                       v1::AddResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return Reply(context, s);
  return Reply(context, (*q)->AddRateLimited(request->keys()));
}

grpc::ServerUnaryReactor* QueueService::Forget(grpc::CallbackServerContext* context,
                                               const v1::ForgetRequest* request,
                                               v1::ForgetResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return Reply(context, s);
  (*q)->Forget(request->keys());
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* QueueService::NumRequeues(grpc::CallbackServerContext* context,
                                                    const v1::NumRequeuesRequest* request,
                                                    v1::NumRequeuesResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (std::string why = InvalidKeyReason(request->key()); !why.empty()) {
    return Reply(context, InvalidField("key", why));
  }
  response->set_requeues((*q)->NumRequeues(request->key()));
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* QueueService::Len(grpc::CallbackServerContext* context,
                                            const v1::LenRequest* request,
                                            v1::LenResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  response->set_len((*q)->Len());
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* QueueService::ShutDown(grpc::CallbackServerContext* context,
                                                 const v1::ShutDownRequest* request,
                                                 v1::ShutDownResponse* response) {
  auto q = FindQueue(queues_, request->queue());
  if (!q.ok()) return Reply(context, q.status());
  if (!request->drain()) {
    (*q)->ShutDown();
    return Reply(context, absl::OkStatus());
  }
  // The drain may take as long as the slowest worker: the poller answers it (see the header).
  (*q)->ShutDown();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  MutexLock lock(&mu_);
  drains_.push_back({*std::move(q), context, reactor});
  ++unanswered_drains_;
  return reactor;
}

size_t QueueService::UnansweredDrains() const {
  MutexLock lock(&mu_);
  return unanswered_drains_;
}

}  // namespace informerd::service
