// WorkService: the Work gRPC service (work.proto) — worker streams that drain a named queue.
//
//   QueueRegistry queues(lookups, {});
//   WorkService work(&queues);
//   builder.RegisterService(&work);
//
// A stream starts with `start` (queue, max_in_flight 1..100000, max_batch, worker_name); the
// server answers Started{queue, stream_id}, then pushes Leases as keys become ready, never more
// than the stream's free credit (max_in_flight minus keys it holds) and with one write in flight
// at a time: leases handed over while a write is pending wait in the stream (bounded by its
// credit) and go out in the next batch. The worker answers with Outcomes; ones for keys this
// stream does not hold, with stale tokens or malformed are answered with Refusals and the stream
// goes on. When the stream ends for any reason (cancel, keepalive failure, error, queue deleted,
// server shutdown) every key it holds is done and added again (NamedQueue's Worker::Detach).
//
// Keys are handed to streams by the queue's dispatcher thread (queue_registry.h); the reactors
// here never block. A stream whose answers (refusals) wait to be written past
// kMaxBufferedControlBytes (limits.h) reads nothing more until they drain: a worker that sends
// and never reads stalls itself, not the daemon.
//
// Thread safety: gRPC calls Process from any thread; each stream serializes its own state.
#ifndef INFORMERD_SERVER_SERVICE_WORK_SERVICE_H_
#define INFORMERD_SERVER_SERVICE_WORK_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "informerd/v1/work.grpc.pb.h"
#include "server/auth/guard.h"
#include "server/service/informer_registry.h"
#include "server/service/queue_registry.h"

namespace informerd::service {

class WorkService final : public v1::Work::CallbackService {
 public:
  // `queues` must outlive the service.
  // `guard` authenticates and authorizes each stream at its start message (verb work on the
  // queue; the read of the object informer it asks for, resolved in `informers`); nullptr:
  // nothing is checked. All must outlive the service.
  explicit WorkService(QueueRegistry* queues, auth::Guard* guard = nullptr,
                       const InformerRegistry* informers = nullptr)
      : queues_(queues), guard_(guard), informers_(informers) {}

  // v1::Work::CallbackService:
  grpc::ServerBidiReactor<v1::ProcessRequest, v1::ProcessResponse>* Process(
      grpc::CallbackServerContext* context) override;

  // Bytes of answers waiting to be written, over all streams; streams not reading for that.
  int64_t buffered_control_bytes() const { return buffered_.bytes.load(); }
  int paused_streams() const { return buffered_.paused.load(); }

 private:
  class Stream;
  struct Buffered {
    std::atomic<int64_t> bytes{0};
    std::atomic<int> paused{0};
  };
  Buffered buffered_;
  QueueRegistry* const queues_;
  auth::Guard* const guard_;
  const InformerRegistry* const informers_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_WORK_SERVICE_H_
