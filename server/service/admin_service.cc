#include "server/service/admin_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "client/api_error.h"

namespace informerd::service {
namespace {

}  // namespace

template <typename Fill>
grpc::ServerUnaryReactor* AdminService::Guarded(grpc::CallbackServerContext* context, Fill fill) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auth::CheckCall(guard_, context, auth::CallKind::kUnary, auth::Need(auth::AdminRequirement()),
                  reactor, [reactor, fill = std::move(fill)](auth::Ticket) mutable {
                    fill();
                    reactor->Finish(grpc::Status::OK);
                  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ListClusters(grpc::CallbackServerContext* context,
                                                     const v1::ListClustersRequest*,
                                                     v1::ListClustersResponse* response) {
  return Guarded(context, [this, response] { FillClusters(response); });
}

grpc::ServerUnaryReactor* AdminService::ListInformers(grpc::CallbackServerContext* context,
                                                      const v1::ListInformersRequest*,
                                                      v1::ListInformersResponse* response) {
  return Guarded(context, [this, response] { FillInformers(response); });
}

grpc::ServerUnaryReactor* AdminService::ListQueues(grpc::CallbackServerContext* context,
                                                   const v1::ListQueuesRequest*,
                                                   v1::ListQueuesResponse* response) {
  return Guarded(context, [this, response] { FillQueues(response); });
}

grpc::ServerUnaryReactor* AdminService::GetReplica(grpc::CallbackServerContext* context,
                                                   const v1::GetReplicaRequest*,
                                                   v1::ReplicaInfo* response) {
  return Guarded(context, [this, response] {
    if (replica_ != nullptr) {
      *response = replica_();
    } else {
      response->set_role(v1::STANDALONE);
    }
  });
}

void AdminService::FillClusters(v1::ListClustersResponse* response) {
  const std::vector<InformerRegistry::Entry> informers = informers_->List();
  for (Clusters::Cluster* c : clusters_->List()) {
    v1::ClusterInfo* info = response->add_clusters();
    info->set_name(c->name);
    info->set_server(c->server);
    info->set_is_default(c->name == clusters_->default_name());
    // The most recent of its own (discovery) error and its informers' reflector errors.
    auto [error, when] = c->last_error();
    for (const InformerRegistry::Entry& e : informers) {
      if (e.spec.cluster() != c->name) continue;
      informer::ReflectorStatus status = e.informer->reflector_status();
      if (!status.last_error.ok() && status.last_error_time > when) {
        error = std::move(status.last_error);
        when = status.last_error_time;
      }
    }
    if (!error.ok()) {
      info->set_last_error(client::DescribeStatus(error));
      info->set_last_error_unix_ms(absl::ToUnixMillis(when));
    }
  }
}

void AdminService::FillInformers(v1::ListInformersResponse* response) {
  std::vector<InformerRegistry::Entry> entries = informers_->List();
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const InformerRegistry::Entry& e : entries) {
    informer_service_->FillInfo(e, response->add_informers());
  }
}

void AdminService::FillQueues(v1::ListQueuesResponse* response) {
  std::vector<std::shared_ptr<NamedQueue>> queues = queues_->List();
  std::sort(queues.begin(), queues.end(),
            [](const auto& a, const auto& b) { return a->name() < b->name(); });
  for (const std::shared_ptr<NamedQueue>& q : queues) {
    v1::QueueDetails* details = response->add_queues();
    *details->mutable_queue()->mutable_spec() = q->spec();
    *details->mutable_queue()->mutable_state() = q->State();
    details->mutable_queue()->set_last_used_unix_ms(absl::ToUnixMillis(q->last_used()));
    details->mutable_queue()->set_pinned(q->pinned());
    for (const WorkerInfo& w : q->Workers()) {
      v1::WorkerInfo* info = details->add_workers();
      info->set_stream_id(w.stream_id);
      info->set_worker_name(w.name);
      info->set_peer(w.peer);
      info->set_max_in_flight(w.max_in_flight);
      info->set_in_flight(static_cast<uint32_t>(w.in_flight));
      info->set_draining(w.draining);
    }
  }
}

}  // namespace informerd::service
