// AdminService: the informerd.v1.Admin gRPC service — what the daemon runs, for operators and
// dashboards: its clusters (with the last error talking to each: discovery, or an informer's
// reflector, whichever is most recent), its informers (sync state, last error, objects, bytes, subscribers)
// and its queues (depth, in flight, delayed, retries, and every worker stream with its peer).
//
//   AdminService admin(&clusters, &informers, &queues, &informer_service);
//   builder.RegisterService(&admin);
//
// Thread safety: gRPC calls it from many threads; everything it reads is thread-safe. It must
// outlive the grpc::Server it is registered with; the pointers must outlive it.
#ifndef INFORMERD_SERVER_SERVICE_ADMIN_SERVICE_H_
#define INFORMERD_SERVER_SERVICE_ADMIN_SERVICE_H_

#include <functional>

#include "informerd/v1/admin.grpc.pb.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/auth/guard.h"
#include "server/service/informer_service.h"
#include "server/service/queue_registry.h"

namespace informerd::service {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // This replica's role (ha/replica.h); nullptr: a standalone daemon.
  using ReplicaInfoFn = std::function<v1::ReplicaInfo()>;

  // `guard` (nullptr: nothing checked) requires verb admin on daemon.informerd.io of every call.
  AdminService(Clusters* clusters, InformerRegistry* informers, QueueRegistry* queues,
               const InformerService* informer_service, auth::Guard* guard = nullptr,
               ReplicaInfoFn replica = nullptr)
      : clusters_(clusters),
        informers_(informers),
        queues_(queues),
        informer_service_(informer_service),
        guard_(guard),
        replica_(std::move(replica)) {}

  grpc::ServerUnaryReactor* ListClusters(grpc::CallbackServerContext* context,
                                         const v1::ListClustersRequest* request,
                                         v1::ListClustersResponse* response) override;
  grpc::ServerUnaryReactor* ListInformers(grpc::CallbackServerContext* context,
                                          const v1::ListInformersRequest* request,
                                          v1::ListInformersResponse* response) override;
  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* context,
                                       const v1::ListQueuesRequest* request,
                                       v1::ListQueuesResponse* response) override;
  grpc::ServerUnaryReactor* GetReplica(grpc::CallbackServerContext* context,
                                       const v1::GetReplicaRequest* request,
                                       v1::ReplicaInfo* response) override;

  // What the List calls answer, without a call (no authorization: the status page on the
  // metrics listener shows the same).
  void FillClusters(v1::ListClustersResponse* response);
  void FillInformers(v1::ListInformersResponse* response);
  void FillQueues(v1::ListQueuesResponse* response);

 private:
  // Answers the call with `fill` once the caller may administer the daemon.
  template <typename Fill>
  grpc::ServerUnaryReactor* Guarded(grpc::CallbackServerContext* context, Fill fill);

  Clusters* const clusters_;
  InformerRegistry* const informers_;
  QueueRegistry* const queues_;
  const InformerService* const informer_service_;
  auth::Guard* const guard_;
  const ReplicaInfoFn replica_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_ADMIN_SERVICE_H_
