// QueueService: the Queues gRPC service (queues.proto) over a QueueRegistry — create, delete and
// inspect named queues, and client-go's workqueue calls (Add, AddAfter, AddRateLimited, Forget,
// NumRequeues, Len, ShutDown) across the process boundary.
//
//   QueueRegistry queues(InformerSourceLookups(&informers, &clusters), {.metrics = &metrics});
//   QueueService service(&queues);
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//
// Every request is validated before anything changes: an unknown queue is NOT_FOUND naming it;
// a bad key ("keys[3]: must not be empty", at most 1024 bytes, at most kMaxKeysPerRequest keys)
// or delay is INVALID_ARGUMENT naming the field; nothing of a rejected batch is added.
//
// Reactions never block: a ShutDown with drain is answered by one poller thread of the service,
// which looks at every waiting drain every 20 ms and answers it once its queue has no key in
// flight, the queue is deleted or shut down by the registry, or the call was cancelled (which
// includes its deadline passing). So however many drains clients start, they cost no thread each.
//
// Thread safety: gRPC calls the methods from any thread.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_SERVICE_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_SERVICE_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "server/auth/guard.h"
#include "server/service/access.h"
#include "server/service/api_call_lanes.h"
#include "server/service/informer_registry.h"
#include "server/service/queue_registry.h"
#include "server/service/status.h"  // ToGrpc

namespace informerd::service {

// Keys per Add/AddAfter/AddRateLimited/Forget request, at most.
inline constexpr int kMaxKeysPerRequest = 10000;

class QueueService final : public v1::Queues::CallbackService {
 public:
  // `queues` must outlive the service. CreateQueue and UpdateQueue of a spec with owner sources
  // (whose kinds are resolved through discovery) wait at most `api_call_max_wait` for the API
  // server, off gRPC's threads (api_call_lanes.h).
  // `guard` authenticates and authorizes every call (access.h; nullptr: nothing is checked);
  // `informers` resolves the informers a queue's sources read, for their authorization. Both
  // must outlive the service.
  explicit QueueService(QueueRegistry* queues,
                        absl::Duration api_call_max_wait = absl::Seconds(30),
                        auth::Guard* guard = nullptr, const InformerRegistry* informers = nullptr);
  // Stops the drain poller, answering drains still waiting with UNAVAILABLE.
  ~QueueService() override;

  // v1::Queues::CallbackService:
  grpc::ServerUnaryReactor* CreateQueue(grpc::CallbackServerContext* context,
                                        const v1::CreateQueueRequest* request,
                                        v1::QueueInfo* response) override;
  grpc::ServerUnaryReactor* UpdateQueue(grpc::CallbackServerContext* context,
                                        const v1::UpdateQueueRequest* request,
                                        v1::QueueInfo* response) override;
  grpc::ServerUnaryReactor* DeleteQueue(grpc::CallbackServerContext* context,
                                        const v1::DeleteQueueRequest* request,
                                        v1::DeleteQueueResponse* response) override;
  grpc::ServerUnaryReactor* GetQueue(grpc::CallbackServerContext* context,
                                     const v1::GetQueueRequest* request,
                                     v1::QueueInfo* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context,
                                const v1::AddRequest* request, v1::AddResponse* response) override;
  grpc::ServerUnaryReactor* AddAfter(grpc::CallbackServerContext* context,
                                     const v1::AddAfterRequest* request,
                                     v1::AddResponse* response) override;
  grpc::ServerUnaryReactor* AddRateLimited(grpc::CallbackServerContext* context,
                                           const v1::AddRateLimitedRequest* request,
                                           v1::AddResponse* response) override;
  grpc::ServerUnaryReactor* Forget(grpc::CallbackServerContext* context,
                                   const v1::ForgetRequest* request,
                                   v1::ForgetResponse* response) override;
  grpc::ServerUnaryReactor* NumRequeues(grpc::CallbackServerContext* context,
                                        const v1::NumRequeuesRequest* request,
                                        v1::NumRequeuesResponse* response) override;
  grpc::ServerUnaryReactor* Len(grpc::CallbackServerContext* context,
                                const v1::LenRequest* request, v1::LenResponse* response) override;
  grpc::ServerUnaryReactor* ShutDown(grpc::CallbackServerContext* context,
                                     const v1::ShutDownRequest* request,
                                     v1::ShutDownResponse* response) override;

  // ShutDown calls with drain received and not yet answered (their Finish not yet returned);
  // for tests, which wait on it.
  size_t UnansweredDrains() const;

 private:
  struct PendingDrain {
    std::shared_ptr<NamedQueue> queue;
    grpc::CallbackServerContext* context;
    grpc::ServerUnaryReactor* reactor;
    auth::Ticket ticket;
  };
  void PollDrains();
  // Answers a CreateQueue/UpdateQueue with what `change` makes of `spec`: here, or on the lane of
  // a cluster whose discovery it may wait on.
  void Apply(
      grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
      v1::QueueInfo* response, const v1::QueueSpec& spec, auth::Ticket ticket,
      std::function<absl::StatusOr<std::shared_ptr<NamedQueue>>(const v1::QueueSpec&)> change);
  // Runs `body(reactor, ticket)` once the caller is allowed what `need` says.
  template <typename Body>
  grpc::ServerUnaryReactor* Guarded(grpc::CallbackServerContext* context, auth::RequirementFn need,
                                    Body body);
  // `verb` on `queue`, and the reads of `spec`'s sources.
  auth::RequirementFn Need(std::string verb, const std::string& queue,
                           const v1::QueueSpec* spec = nullptr) const;

  QueueRegistry* const queues_;
  auth::Guard* const guard_;
  const InformerRegistry* const informers_;
  mutable Mutex mu_;
  std::vector<PendingDrain> drains_ ABSL_GUARDED_BY(mu_);
  size_t unanswered_drains_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
  // Declared last, destroyed first: calls waiting for an API server end before the rest.
  ApiCallLanes lanes_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_SERVICE_H_
