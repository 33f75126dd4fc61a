#include "server/service/work_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "google/protobuf/arena.h"
#include "server/service/access.h"
#include "server/service/limits.h"
#include "server/service/object_proto.h"
#include "server/service/queue_service.h"
#include "server/service/status.h"

namespace informerd::service {

// One worker stream: the gRPC reactor and the queue's LeaseSink in one object.
//
// Lifetime: shared. The stream holds a reference to itself from creation until OnDone; the
// queue's dispatcher holds one while it delivers. So a delivery racing with the stream's end
// finds the object alive (and drops what it brings, since the worker has given those keys back).
//
// gRPC may run a reaction inline from Start*/Finish when called from a thread of ours, so no
// Start*/Finish call is made with mu_ held.
class WorkService::Stream final
    : public grpc::ServerBidiReactor<v1::ProcessRequest, v1::ProcessResponse>,
      public LeaseSink,
      public std::enable_shared_from_this<Stream> {
 public:
  Stream(QueueRegistry* queues, auth::Guard* guard, const InformerRegistry* informers,
         grpc::CallbackServerContext* context, Buffered* buffered)
      : queues_(queues),
        guard_(guard),
        informers_(informers),
        context_(context),
        buffered_(buffered) {}
  ~Stream() override {
    buffered_->bytes.fetch_sub(static_cast<int64_t>(control_bytes_));
    if (read_paused_) buffered_->paused.fetch_sub(1);
  }

  void Begin() {
    self_ = shared_from_this();
    StartRead(in_);
  }

  // LeaseSink (dispatcher thread):
  void Deliver(std::vector<workqueue::Lease> leases) override {
    {
      MutexLock lock(&mu_);
      if (finishing_) return;  // the worker is detached or about to be: the keys went back
      if (!draining_) {
        for (auto& l : leases) pending_leases_.push_back(std::move(l));
        leases.clear();
      }
    }
    // Draining (so Start was handled and worker_ is set): these will never be sent.
    if (!leases.empty()) worker_->GiveBack(leases);
    Pump();
  }
  void Close(const absl::Status& status) override { RequestFinish(ToGrpc(status)); }

  // grpc::ServerBidiReactor:
  void OnReadDone(bool ok) override {
    std::shared_ptr<Stream> keep = shared_from_this();
    if (!ok) {
      // The client half-closed or the stream broke: either way no more outcomes will come.
      RequestFinish(grpc::Status::OK);
      return;
    }
    if (worker_ == nullptr) {
      if (grpc::Status s = ValidateStart(); !s.ok()) {
        RequestFinish(s);
        return;
      }
      Authorize();  // reads on once the caller is allowed
      return;
    } else {
      switch (in_->kind_case()) {
        case v1::ProcessRequest::kOutcomes:
          SendRefusals(worker_->Apply(in_->outcomes()));
          break;
        case v1::ProcessRequest::kHeartbeat:
          SendRefusals(worker_->Heartbeat(in_->heartbeat()));
          break;
        case v1::ProcessRequest::kDrain: {
          std::deque<workqueue::Lease> unsent;
          {
            MutexLock lock(&mu_);
            draining_ = true;
            unsent.swap(pending_leases_);
          }
          // Ends the stream (OK) through Close once nothing is held.
          worker_->Drain(std::vector<workqueue::Lease>(unsent.begin(), unsent.end()));
          break;
        }
        case v1::ProcessRequest::kStart:
          RequestFinish(ToGrpc(InvalidField("start", "sent twice; a stream serves one queue")));
          return;
        default:
          break;  // an empty message: nothing to do
      }
    }
    ReadOnOrPause();
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<Stream> keep = shared_from_this();
    bool resume_reading = false;
    {
      MutexLock lock(&mu_);
      writing_ = false;
      if (read_paused_ && !finishing_ && control_bytes_ <= kMaxBufferedControlBytes / 2) {
        read_paused_ = false;
        buffered_->paused.fetch_sub(1);
        resume_reading = true;
      }
      if (!ok) {
        // The stream is broken: nothing more can be written, so finish now.
        finishing_ = true;
        ClearControlLocked();
        if (!finish_status_) finish_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed");
      }
    }
    if (resume_reading) NextRead();
    Pump();
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    // Every held key is done and added again; the queue lets go of this sink.
    if (worker_ != nullptr) worker_->Detach();
    std::shared_ptr<Stream> last = std::move(self_);
    // `last` may be the final reference: this object may be gone after the next line.
  }

 private:
  // Reads the next message into a fresh one on the reset arena: parsing a batch of outcomes then
  // allocates nothing once the arena's first block has grown to a batch (a message reused
  // instead would free and rebuild its `outcomes` on every parse: clearing a oneof deletes it).
  void NextRead() {
    in_ = nullptr;
    arena_.Reset();
    in_ = google::protobuf::Arena::CreateMessage<v1::ProcessRequest>(&arena_);
    StartRead(in_);
  }

  // Reads the next message, unless the answers waiting to be written are over their bound: then
  // reading resumes when a write brings them down to half (OnWriteDone).
  void ReadOnOrPause() {
    {
      MutexLock lock(&mu_);
      if (control_bytes_ > kMaxBufferedControlBytes) {
        read_paused_ = true;
        buffered_->paused.fetch_add(1);
        return;
      }
    }
    NextRead();
  }

  void PushControlLocked(v1::ProcessResponse response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t bytes = response.ByteSizeLong();
    control_bytes_ += bytes;
    buffered_->bytes.fetch_add(static_cast<int64_t>(bytes));
    pending_control_.push_back({std::move(response), bytes});
  }
  void ClearControlLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    buffered_->bytes.fetch_sub(static_cast<int64_t>(control_bytes_));
    control_bytes_ = 0;
    pending_control_.clear();
  }

  // The first message's checks that need no lookup.
  grpc::Status ValidateStart() {
    if (in_->kind_case() != v1::ProcessRequest::kStart) {
      return ToGrpc(InvalidField("start", "the first message must be start"));
    }
    const v1::Start& start = in_->start();
    if (start.queue().empty()) {
      return ToGrpc(InvalidField("start.queue", "required"));
    }
    if (start.max_in_flight() < 1 || start.max_in_flight() > kMaxInFlight) {
      return ToGrpc(InvalidField("start.max_in_flight",
                                 absl::StrCat("must be in 1..", kMaxInFlight, ", got ",
                                              start.max_in_flight())));
    }
    if (start.worker_name().size() > 253) {
      return ToGrpc(InvalidField("start.worker_name", "at most 253 bytes"));
    }
    if (start.max_batch_bytes() > kMaxMaxBatchBytes) {
      return ToGrpc(
          InvalidField("start.max_batch_bytes", absl::StrCat("at most ", kMaxMaxBatchBytes)));
    }
    return grpc::Status::OK;
  }

  // Asks the guard whether the caller may take work from the queue (and read the objects it
  // asked for); the stream does not finish while it waits (authorizing_).
  void Authorize() {
    {
      MutexLock lock(&mu_);
      authorizing_ = true;
    }
    const v1::Start& start = in_->start();
    auth::RequirementFn need = [informers = informers_, queue = start.queue(),
                                object_informer = start.object_informer_id()]()
        -> absl::StatusOr<auth::Requirement> {
      std::vector<auth::Attributes> all = {auth::QueueAttributes("work", queue)};
      if (!object_informer.empty() && informers != nullptr) {
        if (absl::Status s = AppendWholeRead(*informers, object_informer,
                                             "start.object_informer_id", &all);
            !s.ok()) {
          return s;
        }
      }
      return auth::Requirement::AllOf(std::move(all));
    };
    std::shared_ptr<Stream> self = shared_from_this();
    auth::CheckCall(
        guard_, context_, auth::CallKind::kStream, std::move(need),
        [self](auth::Ticket ticket) { self->Authorized(std::move(ticket)); },
        [self](const absl::Status& s) {
          {
            MutexLock lock(&self->mu_);
            self->authorizing_ = false;
          }
          self->RequestFinish(ToGrpc(s));
        });
  }

  void Authorized(auth::Ticket ticket) {
    bool finishing;
    {
      MutexLock lock(&mu_);
      finishing = finishing_;
    }
    grpc::Status s = grpc::Status::OK;
    if (!finishing) {
      ticket.OnRevoked([weak = weak_from_this()](const absl::Status& s) {
        if (std::shared_ptr<Stream> stream = weak.lock()) stream->RequestFinish(ToGrpc(s));
      });
      ticket_ = std::move(ticket);
      s = HandleStart();
      // Before authorizing_ ends, so that no Finish can precede it.
      if (s.ok()) StartRead(in_);
    }
    {
      MutexLock lock(&mu_);
      authorizing_ = false;
    }
    if (!s.ok()) {
      RequestFinish(s);
      return;
    }
    Pump();
  }

  grpc::Status HandleStart() {
    const v1::Start& start = in_->start();
    if (!start.object_informer_id().empty()) {
      std::optional<SourceInformer> inf = queues_->lookups().informer(start.object_informer_id());
      if (!inf.has_value() || inf->informer == nullptr) {
        return ToGrpc(Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND,
                            absl::StrCat("start.object_informer_id: no such informer \"",
                                         start.object_informer_id(), "\""),
                            {{"field", "start.object_informer_id"},
                             {"informer_id", start.object_informer_id()}}));
      }
      object_source_ = *std::move(inf);
    }
    auto queue = queues_->Get(start.queue());
    if (!queue.ok()) return ToGrpc(queue.status());
    auto worker = (*queue)->Attach({.peer = context_->peer(),
                                    .name = start.worker_name(),
                                    .max_in_flight = start.max_in_flight(),
                                    .max_batch = start.max_batch()},
                                   shared_from_this());
    if (!worker.ok()) return ToGrpc(worker.status());
    // Member order: the worker is released before the queue it points into.
    queue_ = *std::move(queue);
    worker_ = *std::move(worker);
    const uint32_t batch = start.max_batch();
    v1::ProcessResponse r;
    r.mutable_started()->set_queue(start.queue());
    r.mutable_started()->set_stream_id(worker_->stream_id());
    r.mutable_started()->set_epoch(queue_->epoch());
    r.mutable_started()->set_lease_timeout_ms(absl::ToInt64Milliseconds(queue_->lease_timeout()));
    max_batch_bytes_ =
        start.max_batch_bytes() == 0 ? kDefaultMaxBatchBytes : start.max_batch_bytes();
    {
      MutexLock lock(&mu_);
      max_batch_ = batch == 0 || batch > start.max_in_flight() ? start.max_in_flight() : batch;
      // Started goes out before any lease: leases wait until `started_` is set.
      PushControlLocked(std::move(r));
      started_ = true;
    }
    Pump();
    return grpc::Status::OK;
  }

  void SendRefusals(std::vector<v1::Refusal> refusals) {
    if (refusals.empty()) return;
    v1::ProcessResponse r;
    for (auto& x : refusals) *r.mutable_refusals()->add_refusals() = std::move(x);
    Send(std::move(r));
  }

  void Send(v1::ProcessResponse response) {
    {
      MutexLock lock(&mu_);
      if (finishing_) return;
      PushControlLocked(std::move(response));
    }
    Pump();
  }

  void RequestFinish(grpc::Status status) {
    {
      MutexLock lock(&mu_);
      if (!finishing_) {
        finishing_ = true;
        finish_status_ = std::move(status);
      }
    }
    Pump();
  }

  // Starts the next write, or Finish once finishing and nothing more is to be written. At most
  // one write is in flight; leases are not written once finishing (the worker gives them back)
  // or draining (they were given back).
  void Pump() {
    enum { kNothing, kWrite, kLeases, kFinish } action = kNothing;
    grpc::Status status;
    std::vector<workqueue::Lease>& batch = batch_;
    {
      MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (!pending_control_.empty()) {
        control_out_ = std::move(pending_control_.front().response);
        control_bytes_ -= pending_control_.front().bytes;
        buffered_->bytes.fetch_sub(static_cast<int64_t>(pending_control_.front().bytes));
        pending_control_.pop_front();
        action = kWrite;
      } else if (finishing_ && !authorizing_) {
        finished_ = true;
        status = finish_status_.value_or(grpc::Status::OK);
        action = kFinish;
      } else if (started_ && !draining_ && !pending_leases_.empty()) {
        const size_t n = std::min<size_t>(max_batch_, pending_leases_.size());
        batch.clear();
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(pending_leases_.front()));
          pending_leases_.pop_front();
        }
        action = kLeases;
      }
      if (action == kWrite || action == kLeases) writing_ = true;
    }
    if (action == kLeases) {
      const size_t used = FillLeases(batch);
      if (used < batch.size()) {
        // Over the byte cap: the rest goes first in the next batch (or back, if draining began).
        std::vector<workqueue::Lease> rest(std::make_move_iterator(batch.begin() + used),
                                           std::make_move_iterator(batch.end()));
        {
          MutexLock lock(&mu_);
          if (!draining_) {
            pending_leases_.insert(pending_leases_.begin(), std::make_move_iterator(rest.begin()),
                                   std::make_move_iterator(rest.end()));
            rest.clear();
          }
        }
        if (!rest.empty()) worker_->GiveBack(rest);
      }
      StartWrite(&lease_out_);
    } else if (action == kWrite) {
      StartWrite(&control_out_);
    } else if (action == kFinish) {
      Finish(status);
    }
  }

  // Writes leases of `batch` into lease_out_ until the next would take it past max_batch_bytes_
  // (the first always goes); returns how many. Called by the writer only, without mu_. The
  // message is reused: clearing the repeated field keeps its Lease messages and their strings'
  // buffers for the next batch, so a steady stream allocates nothing here.
  size_t FillLeases(const std::vector<workqueue::Lease>& batch) {
    auto* leases = lease_out_.mutable_leases()->mutable_leases();
    leases->Clear();
    size_t bytes = 0;
    size_t used = 0;
    const std::shared_ptr<workqueue::RateLimiter> limiter = queue_->rate_limiter();
    for (const workqueue::Lease& l : batch) {
      v1::Lease* pl = leases->Add();
      pl->set_key(l.key);
      pl->set_token(l.token);
      pl->set_priority(l.priority);
      pl->set_is_in_initial_list(l.initial_list);
      // Requeue counts are read outside our lock (the limiter has its own).
      pl->set_requeues(limiter->NumRequeues(l.key));
      const QueueKeyParts parts = SplitQueueKey(l.key);
      if (!parts.cluster.empty()) {
        pl->set_cluster(parts.cluster.data(), parts.cluster.size());
        pl->set_object_key(parts.object_key.data(), parts.object_key.size());
      } else {
        pl->set_object_key(l.key);
      }
      if (object_source_.has_value()) {
        v1::LeaseObject* lo = pl->mutable_object();
        if (parts.cluster == object_source_->cluster) {
          informer::GetResult got = object_source_->informer->lister().Get(parts.object_key);
          if (got.object != nullptr) {
            lo->set_found(true);
            ObjectToProto(*got.object, lo->mutable_object());
          }
        }
      }
      const size_t size = pl->ByteSizeLong();
      if (used > 0 && bytes + size > max_batch_bytes_) {
        leases->RemoveLast();
        break;
      }
      bytes += size;
      ++used;
    }
    return used;
  }

  QueueRegistry* const queues_;
  auth::Guard* const guard_;
  const InformerRegistry* const informers_;
  grpc::CallbackServerContext* const context_;
  auth::Ticket ticket_;  // the caller's stream slot, from authorization until the stream goes
  std::shared_ptr<Stream> self_;  // until OnDone
  // Read side: touched only by the serialized read reactions (and OnDone, after them).
  // The arena's first block is ours, and Reset keeps it: a batch of 128 outcomes fits in it.
  static constexpr size_t kArenaBlock = 16 << 10;
  std::unique_ptr<char[]> arena_block_{new char[kArenaBlock]};
  google::protobuf::Arena arena_{arena_block_.get(), kArenaBlock};
  v1::ProcessRequest* in_ = google::protobuf::Arena::CreateMessage<v1::ProcessRequest>(&arena_);
  std::shared_ptr<NamedQueue> queue_;
  std::unique_ptr<Worker> worker_;
  // Set by HandleStart, before any delivery can be written; read by the writer.
  std::optional<SourceInformer> object_source_;
  size_t max_batch_bytes_ = kDefaultMaxBatchBytes;

  Mutex mu_;
  // The write in flight is one of these two; they and batch_ are touched only by whoever set
  // writing_.
  v1::ProcessResponse control_out_;  // Started, refusals
  v1::ProcessResponse lease_out_;    // always holds `leases`
  std::vector<workqueue::Lease> batch_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // The first message waits for the guard: nothing finishes the stream meanwhile.
  bool authorizing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  uint32_t max_batch_ ABSL_GUARDED_BY(mu_) = 1;
  struct Control {
    v1::ProcessResponse response;
    size_t bytes;
  };
  std::deque<Control> pending_control_ ABSL_GUARDED_BY(mu_);
  size_t control_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of pending_control_
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  Buffered* const buffered_;  // the service's sums of control_bytes_ and read_paused_
  std::deque<workqueue::Lease> pending_leases_ ABSL_GUARDED_BY(mu_);
};

grpc::ServerBidiReactor<v1::ProcessRequest, v1::ProcessResponse>* WorkService::Process(
    grpc::CallbackServerContext* context) {
  auto stream = std::make_shared<Stream>(queues_, guard_, informers_, context, &buffered_);
  stream->Begin();
  return stream.get();
}

}  // namespace informerd::service
