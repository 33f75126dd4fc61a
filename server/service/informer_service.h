// InformerService: the informerd.v1.Informers gRPC service — ensure, inspect and delete shared
// informers (InformerRegistry) and read their caches: Get, List in batches, and Watch streams fed
// from a Pop/Done ProcessorListener per subscriber.
//
//   InformerRegistry informers(&clusters, {});
//   InformerService service(&informers, {.max_subscribers = 1000});
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//
// Uses gRPC's callback API: no thread is held per call. Watch is a raw method: its request is
// parsed here (a malformed one is INVALID_ARGUMENT naming the field) and its messages are wire
// bytes (watch_encoding.h) that share each object's encoding among all the streams sending it.
// Unary calls answer inside the reaction (EnsureInformer may wait for discovery the first time a cluster is asked); WaitForSync polls the
// informer on a timer of the injected clock until it syncs or its deadline passes; List writes one
// batch at a time as the stream takes them; Watch pops up to max_batch notifications from its
// listener per message and pops again only when the previous write completed, so a subscriber
// that does not read holds one message in flight and a bounded listener buffer (past which it is
// re-snapshotted) — never unbounded memory. The listener wakes an idle Watch through on_ready.
//
// Limits (InformerServiceOptions): subscribers per informer, per principal of one informer and in
// total (RESOURCE_EXHAUSTED beyond), events or objects per message, listener buffer size. Every List and Watch message is
// also capped by bytes (the request's max_batch_bytes, default kDefaultMaxBatchBytes from
// limits.h), so a client with gRPC's default receive limit reads any batch; an object larger
// than the cap goes alone. DeleteInformer ends that informer's open Watch streams with
// UNAVAILABLE.
//
// Errors: every error carries a reason (status.h, errors.proto) — INVALID_FIELD naming the
// request field, INFORMER_NOT_FOUND, NOT_SYNCED (WaitForSync's deadline, with the reflector's
// state and last error), SUBSCRIBER_LIMIT, INFORMER_DELETED — converted by ToGrpc.
//
// Thread safety: gRPC calls the service from many threads; every method is thread-safe. The
// service must outlive the grpc::Server it is registered with (shut the server down first).
#ifndef INFORMERD_SERVER_SERVICE_INFORMER_SERVICE_H_
#define INFORMERD_SERVER_SERVICE_INFORMER_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "server/auth/guard.h"
#include "server/service/api_call_lanes.h"
#include "server/service/informer_registry.h"

namespace informerd::service {

struct InformerServiceOptions {
  // Open Watch streams per informer and in all.
  size_t max_subscribers_per_informer = 256;
  size_t max_subscribers = 4096;
  // Of one informer's, held by one principal at most (authenticated callers; without
  // authentication every call is one tenant's): no tenant takes a shared informer's slots from
  // the others.
  size_t max_subscribers_per_principal_per_informer = 64;
  // Events per WatchResponse and objects per ListResponse at most (requests may ask for fewer).
  uint32_t max_batch = 1024;
  // The largest WatchRequest.buffer_size accepted.
  uint32_t max_buffer_size = 1 << 20;
  // A Watch subscriber's buffer in bytes (of the objects its notifications reference): one that
  // falls further behind re-snapshots, whatever its buffer_size.
  size_t max_buffer_bytes = 32 << 20;
  // How often WaitForSync, and a Watch waiting to send SYNCED, look at the informer again.
  absl::Duration sync_poll_interval = absl::Milliseconds(20);
  // nullptr: Clock::Real(). Must outlive the service.
  Clock* clock = nullptr;
  // EnsureInformer waits at most this long for the API server (discovery), whatever the call's
  // deadline (api_call_lanes.h).
  absl::Duration api_call_max_wait = absl::Seconds(30);
  // Authentication and authorization of every call (access.h lists the rules); nullptr: none
  // (tests of the service alone). Must outlive the service.
  auth::Guard* guard = nullptr;
};

class InformerService final
    : public v1::Informers::WithRawCallbackMethod_Watch<v1::Informers::CallbackService> {
 public:
  // REQUIRES: `informers` outlives the service.
  InformerService(InformerRegistry* informers, InformerServiceOptions options);
  ~InformerService() override;

  // Lanes made for EnsureInformer's calls: at most one per configured cluster.
  size_t api_call_lanes() const;
  // Open Watch streams of informer `id`.
  size_t subscribers(absl::string_view id) const;
  // The informer's info with this service's subscriber count (also what Admin lists).
  void FillInfo(const InformerRegistry::Entry& entry, v1::InformerInfo* info) const;

  // v1::Informers::CallbackService:
  grpc::ServerUnaryReactor* EnsureInformer(grpc::CallbackServerContext* context,
                                           const v1::EnsureInformerRequest* request,
                                           v1::InformerInfo* response) override;
  grpc::ServerUnaryReactor* DeleteInformer(grpc::CallbackServerContext* context,
                                           const v1::DeleteInformerRequest* request,
                                           v1::DeleteInformerResponse* response) override;
  grpc::ServerUnaryReactor* GetInformer(grpc::CallbackServerContext* context,
                                        const v1::GetInformerRequest* request,
                                        v1::InformerInfo* response) override;
  grpc::ServerUnaryReactor* WaitForSync(grpc::CallbackServerContext* context,
                                        const v1::WaitForSyncRequest* request,
                                        v1::InformerInfo* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request, v1::GetResponse* response) override;
  grpc::ServerWriteReactor<v1::ListResponse>* List(grpc::CallbackServerContext* context,
                                                   const v1::ListRequest* request) override;
  // A serialized v1::WatchRequest in, serialized v1::WatchResponses out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request) override;

 private:
  class WaitForSyncReactor;
  class ListReactor;
  class WatchReactor;

  void RemoveSubscriber(const std::string& id, WatchReactor* reactor);
  // Ends Watch stream `reactor` of informer `id` with `status` if it is still open.
  void RevokeWatch(const std::string& id, WatchReactor* reactor, const absl::Status& status);
  // Registers an allowed Watch stream and starts it (or ends it with why not).
  void StartWatch(WatchReactor* reactor, const v1::WatchRequest& request, auth::Ticket ticket);
  // EnsureInformer's admission: `caller` may read the resolved resource, and may create one more
  // informer (per-caller limit) when it does not run yet; then `*admitted` is its id, for
  // Guard::FinishInformer once Ensure returned. `cluster`: the configured cluster the spec names
  // (InformerRegistry::Check's answer), whose RBAC decides.
  InformerRegistry::Admission AdmitFor(auth::Caller* caller, const v1::InformerSpec& spec,
                                       const std::string& cluster, std::string* admitted) const;

  InformerRegistry* const informers_;
  const InformerServiceOptions options_;
  Clock* const clock_;

  // Passed through by a WaitForSync reactor just before it finishes, and taken by the
  // destructor: the order of the two as ThreadSanitizer can see it.
  mutable Mutex finished_mu_;
  mutable Mutex mu_;
  // One informer's open Watch streams, with the principal each counts against (nullptr: none).
  struct Subscribers {
    absl::flat_hash_map<WatchReactor*, const auth::Principal*> reactors;
    absl::flat_hash_map<const auth::Principal*, size_t> per_principal;
  };
  // By informer id; total_subscribers_ is the sum of their sizes.
  absl::flat_hash_map<std::string, Subscribers> subscribers_ ABSL_GUARDED_BY(mu_);
  size_t total_subscribers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t watches_started_ ABSL_GUARDED_BY(mu_) = 0;
  // EnsureInformer runs here, off gRPC's threads. Declared last, destroyed first: calls still
  // waiting for an API server end before the rest of the service goes.
  std::unique_ptr<ApiCallLanes> lanes_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_INFORMER_SERVICE_H_
