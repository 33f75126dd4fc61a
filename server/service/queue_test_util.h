// Test harness for the Queues and Work services: a real grpc::Server on 127.0.0.1 port 0 over a
// QueueRegistry, and helpers for worker streams driven through real stubs.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_TEST_UTIL_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"
#include "server/service/queue_registry.h"
#include "server/service/queue_service.h"
#include "server/service/work_service.h"

namespace informerd::service::testing {

class QueueServer {
 public:
  // Informers by id, all of the default cluster.
  using InformerLookup =
      std::function<std::shared_ptr<informer::SharedInformer>(absl::string_view id)>;

  explicit QueueServer(InformerLookup lookup = [](absl::string_view) { return nullptr; })
      : QueueServer(DefaultClusterLookups(std::move(lookup))) {}
  explicit QueueServer(SourceLookups lookups, QueueRegistryOptions options = {})
      : registry_(std::move(lookups), options), queues_(&registry_), work_(&registry_) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&queues_);
    builder.RegisterService(&work_);
    server_ = builder.BuildAndStart();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    queues_stub_ = v1::Queues::NewStub(channel_);
    work_stub_ = v1::Work::NewStub(channel_);
  }
  ~QueueServer() {
    registry_.ShutDownAll(absl::ZeroDuration());  // ends every worker stream
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    // Then the services (their threads may still be finishing calls), then the server: members
    // are destroyed in reverse order, and server_ is declared first.
  }

  static SourceLookups DefaultClusterLookups(InformerLookup lookup) {
    SourceLookups lookups;
    lookups.informer = [lookup](absl::string_view id) -> std::optional<SourceInformer> {
      std::shared_ptr<informer::SharedInformer> inf = lookup(id);
      if (inf == nullptr) return std::nullopt;
      return SourceInformer{.informer = std::move(inf), .cluster = ""};
    };
    return lookups;
  }

  QueueRegistry& registry() { return registry_; }
  v1::Queues::Stub& queues() { return *queues_stub_; }
  v1::Work::Stub& work() { return *work_stub_; }
  QueueService& queue_service() { return queues_; }
  WorkService& work_service() { return work_; }

  grpc::Status CreateQueue(const v1::QueueSpec& spec, v1::QueueInfo* info = nullptr) {
    grpc::ClientContext ctx;
    v1::CreateQueueRequest req;
    *req.mutable_spec() = spec;
    v1::QueueInfo out;
    return queues_stub_->CreateQueue(&ctx, req, info != nullptr ? info : &out);
  }
  grpc::Status UpdateQueue(const v1::QueueSpec& spec, bool allow_missing = false,
                           v1::QueueInfo* info = nullptr) {
    grpc::ClientContext ctx;
    v1::UpdateQueueRequest req;
    *req.mutable_spec() = spec;
    req.set_allow_missing(allow_missing);
    v1::QueueInfo out;
    return queues_stub_->UpdateQueue(&ctx, req, info != nullptr ? info : &out);
  }
  int64_t NumRequeues(const std::string& queue, const std::string& key) {
    grpc::ClientContext ctx;
    v1::NumRequeuesRequest req;
    req.set_queue(queue);
    req.set_key(key);
    v1::NumRequeuesResponse resp;
    EXPECT_TRUE(queues_stub_->NumRequeues(&ctx, req, &resp).ok());
    return resp.requeues();
  }
  grpc::Status Add(const std::string& queue, const std::vector<std::string>& keys) {
    grpc::ClientContext ctx;
    v1::AddRequest req;
    req.set_queue(queue);
    for (const auto& k : keys) req.add_keys(k);
    v1::AddResponse resp;
    return queues_stub_->Add(&ctx, req, &resp);
  }
  uint64_t Len(const std::string& queue) {
    grpc::ClientContext ctx;
    v1::LenRequest req;
    req.set_queue(queue);
    v1::LenResponse resp;
    EXPECT_TRUE(queues_stub_->Len(&ctx, req, &resp).ok());
    return resp.len();
  }
  v1::QueueState State(const std::string& queue) {
    grpc::ClientContext ctx;
    v1::GetQueueRequest req;
    req.set_queue(queue);
    v1::QueueInfo info;
    EXPECT_TRUE(queues_stub_->GetQueue(&ctx, req, &info).ok());
    return info.state();
  }

 private:
  std::unique_ptr<grpc::Server> server_;
  QueueRegistry registry_;
  QueueService queues_;
  WorkService work_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Queues::Stub> queues_stub_;
  std::unique_ptr<v1::Work::Stub> work_stub_;
};

// A synchronous worker stream.
class WorkerStream {
 public:
  WorkerStream(v1::Work::Stub& stub, const std::string& queue, uint32_t max_in_flight,
               uint32_t max_batch = 0)
      : WorkerStream(stub, StartOf(queue, max_in_flight, max_batch)) {}
  WorkerStream(v1::Work::Stub& stub, const v1::Start& start) {
    stream_ = stub.Process(&ctx_);
    v1::ProcessRequest request;
    *request.mutable_start() = start;
    stream_->Write(request);
  }
  static v1::Start StartOf(const std::string& queue, uint32_t max_in_flight,
                           uint32_t max_batch = 0) {
    v1::Start start;
    start.set_queue(queue);
    start.set_max_in_flight(max_in_flight);
    start.set_max_batch(max_batch);
    start.set_worker_name("test");
    return start;
  }
  ~WorkerStream() {
    if (finished_) return;
    ctx_.TryCancel();
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
    }
    stream_->Finish().IgnoreError();
  }
  // Next message, or false when the stream ended.
  bool Read(v1::ProcessResponse* r) { return stream_->Read(r); }
  // Cancels the call: a Write blocked on flow control returns false.
  void Cancel() { ctx_.TryCancel(); }
  // Reads until Started, then returns the stream id ("" if the stream ended).
  std::string ReadStarted(v1::Started* started = nullptr) {
    v1::ProcessResponse r;
    if (!stream_->Read(&r) || !r.has_started()) return "";
    if (started != nullptr) *started = r.started();
    return r.started().stream_id();
  }
  // Next batch of leases (skipping other messages); empty when the stream ended.
  std::vector<v1::Lease> ReadLeases() {
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
      if (r.has_leases()) return {r.leases().leases().begin(), r.leases().leases().end()};
    }
    return {};
  }
  // Takes `n` leases, answering each with SUCCESS, in the order they came.
  std::vector<v1::Lease> TakeLeases(size_t n) {
    std::vector<v1::Lease> got;
    while (got.size() < n) {
      std::vector<v1::Lease> leases = ReadLeases();
      if (leases.empty()) {
        ADD_FAILURE() << "the stream ended after " << got.size() << " of " << n << " leases";
        break;
      }
      for (v1::Lease& l : leases) {
        EXPECT_TRUE(Send(l, v1::Outcome::SUCCESS));
        got.push_back(std::move(l));
      }
    }
    return got;
  }
  // TakeLeases(n) as (key, priority).
  std::vector<std::pair<std::string, int32_t>> TakePriorities(size_t n) {
    std::vector<std::pair<std::string, int32_t>> got;
    for (const v1::Lease& l : TakeLeases(n)) got.emplace_back(l.key(), l.priority());
    return got;
  }
  bool Send(const std::vector<v1::Outcome>& outcomes) {
    v1::ProcessRequest req;
    for (const auto& o : outcomes) *req.mutable_outcomes()->add_outcomes() = o;
    return stream_->Write(req);
  }
  bool Send(const v1::Lease& lease, v1::Outcome::Result result, int64_t after_ms = 0) {
    return Send({Outcome(lease.key(), lease.token(), result, after_ms)});
  }
  bool Drain() {
    v1::ProcessRequest req;
    req.mutable_drain();
    return stream_->Write(req);
  }
  bool Heartbeat(const std::vector<v1::Lease>& leases) {
    v1::ProcessRequest req;
    for (const v1::Lease& l : leases) {
      v1::LeaseRef* ref = req.mutable_heartbeat()->add_leases();
      ref->set_key(l.key());
      ref->set_token(l.token());
    }
    return stream_->Write(req);
  }
  // Next Refusals (skipping other messages); empty when the stream ended.
  std::vector<v1::Refusal> ReadRefusals() {
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
      if (r.has_refusals()) return {r.refusals().refusals().begin(), r.refusals().refusals().end()};
    }
    return {};
  }
  // The stream's final status after the server ended it (the client writes nothing more).
  grpc::Status AwaitEnd() {
    finished_ = true;
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
    }
    return stream_->Finish();
  }
  static v1::Outcome Outcome(const std::string& key, uint64_t token, v1::Outcome::Result result,
                             int64_t after_ms = 0) {
    v1::Outcome o;
    o.set_key(key);
    o.set_token(token);
    o.set_result(result);
    o.set_requeue_after_ms(after_ms);
    return o;
  }
  grpc::Status Finish() {
    finished_ = true;
    stream_->WritesDone();
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
    }
    return stream_->Finish();
  }
  grpc::ClientContext& context() { return ctx_; }

 private:
  bool finished_ = false;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ProcessRequest, v1::ProcessResponse>> stream_;
};

inline v1::QueueSpec Spec(const std::string& name) {
  v1::QueueSpec spec;
  spec.set_name(name);
  return spec;
}

}  // namespace informerd::service::testing

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_TEST_UTIL_H_
