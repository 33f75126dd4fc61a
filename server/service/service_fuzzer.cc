// libFuzzer target: every request of every service (Informers, Queues, Work, Admin), parsed from
// arbitrary bytes and sent through the real services in one in-process gRPC server, must end
// with an answer — never a crash, a hang, a sanitizer report or unbounded memory.
//
// Input: the first byte picks the call (kCalls below, modulo their number); the rest is the
// serialized request. For Work.Process the rest is a sequence of ProcessRequest messages, each
// after a 2-byte little-endian length, sent on one stream and then half-closed.
//
// The services are wired as server/daemon.cc wires them, on one cluster whose API server
// (127.0.0.1:1) refuses connections, so informer calls run their validation and fail fast. Each
// input starts from the same state: one queue "fuzz" without sources holding the keys
// "default/a" and "default/b"; every queue and informer an input made is deleted after it.
//
// Hangs are failures: every call has a deadline, a unary call (other than WaitForSync) that
// runs into it aborts, and a watchdog aborts when one input takes longer than 60 s in all.
// Built by tools/fuzz (clang, -fsanitize=fuzzer,address,undefined); also run over its seed
// corpus by //server/service:service_fuzzer_test under Bazel.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"
#include "server/service/admin_service.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/service/informer_service.h"
#include "server/service/queue_registry.h"
#include "server/service/queue_service.h"
#include "server/service/source_lookups.h"
#include "server/service/work_service.h"
#include "spdlog/spdlog.h"

namespace informerd::service {
namespace {

// A unary call that takes this long has hung (the services answer in microseconds here, but
// a ThreadSanitizer build on a loaded 2-core machine once took over 10 s for a CreateQueue).
constexpr absl::Duration kUnaryDeadline = absl::Seconds(30);
// Calls that may rightly wait (WaitForSync, Watch, Process) are cut off after this.
constexpr absl::Duration kWaitingDeadline = absl::Milliseconds(100);
// One whole input (calls, then cleanup) taking longer than this has hung.
constexpr absl::Duration kInputDeadline = absl::Seconds(60);

// Aborts the process when an input runs longer than kInputDeadline.
class Watchdog {
 public:
  Watchdog() : thread_([this] { Run(); }) { thread_.detach(); }

  void Begin() {
    MutexLock lock(&mu_);
    deadline_ = absl::Now() + kInputDeadline;
    ++input_;
  }
  void End() {
    MutexLock lock(&mu_);
    deadline_ = absl::InfiniteFuture();
  }

 private:
  void Run() {
    MutexLock lock(&mu_);
    while (true) {
      mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return deadline_ != absl::InfiniteFuture(); });
      const uint64_t input = input_;
      if (!mu_.AwaitWithDeadline(
              [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                return input_ != input || deadline_ == absl::InfiniteFuture();
              },
              deadline_)) {
        std::fprintf(stderr, "service_fuzzer: an input ran longer than %s (a hang)\n",
                     absl::FormatDuration(kInputDeadline).c_str());
        std::abort();
      }
    }
  }

  Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t input_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// The services of server/daemon.cc on one in-process server.
struct Harness {
  Harness() {
    // Quiet: the services' logs and protobuf's complaints about invalid UTF-8 in the inputs.
    spdlog::set_level(spdlog::level::off);
    google::protobuf::SetLogHandler(nullptr);
    client::RestConfig refused;
    refused.host = "http://127.0.0.1:1";
    if (absl::Status s = clusters.Add({.name = "refused", .config = refused, .is_default = true});
        !s.ok()) {
      std::fprintf(stderr, "service_fuzzer: %s\n", s.ToString().c_str());
      std::abort();
    }
    informers = std::make_unique<InformerRegistry>(&clusters, InformerRegistryOptions{});
    queues = std::make_unique<QueueRegistry>(InformerSourceLookups(informers.get(), &clusters),
                                             QueueRegistryOptions{});
    informer_service = std::make_unique<InformerService>(informers.get(), InformerServiceOptions{});
    queue_service = std::make_unique<QueueService>(queues.get());
    work_service = std::make_unique<WorkService>(queues.get());
    admin_service = std::make_unique<AdminService>(&clusters, informers.get(), queues.get(),
                                                   informer_service.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(informer_service.get());
    builder.RegisterService(queue_service.get());
    builder.RegisterService(work_service.get());
    builder.RegisterService(admin_service.get());
    server = builder.BuildAndStart();
    if (server == nullptr) {
      std::fprintf(stderr, "service_fuzzer: the in-process server did not start\n");
      std::abort();
    }
    std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
    informers_stub = v1::Informers::NewStub(channel);
    queues_stub = v1::Queues::NewStub(channel);
    work_stub = v1::Work::NewStub(channel);
    admin_stub = v1::Admin::NewStub(channel);
    Reset();
  }

  // Back to the state every input starts from.
  void Reset() {
    for (const std::shared_ptr<NamedQueue>& q : queues->List()) (void)queues->Delete(q->name());
    for (const InformerRegistry::Entry& e : informers->List()) (void)informers->Delete(e.id);
    v1::QueueSpec spec;
    spec.set_name("fuzz");
    absl::StatusOr<std::shared_ptr<NamedQueue>> q = queues->Create(spec);
    Keys keys;
    keys.Add("default/a");
    keys.Add("default/b");
    if (!q.ok() || !(*q)->Add(keys).ok()) {
      std::fprintf(stderr, "service_fuzzer: cannot create the queue \"fuzz\"\n");
      std::abort();
    }
  }

  Clusters clusters;
  std::unique_ptr<InformerRegistry> informers;
  std::unique_ptr<QueueRegistry> queues;
  std::unique_ptr<InformerService> informer_service;
  std::unique_ptr<QueueService> queue_service;
  std::unique_ptr<WorkService> work_service;
  std::unique_ptr<AdminService> admin_service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Informers::Stub> informers_stub;
  std::unique_ptr<v1::Queues::Stub> queues_stub;
  std::unique_ptr<v1::Work::Stub> work_stub;
  std::unique_ptr<v1::Admin::Stub> admin_stub;
  Watchdog watchdog;
};

Harness& TheHarness() {
  static Harness* harness = new Harness();  // Never destroyed: libFuzzer exits without asking.
  return *harness;
}

// The input being run, printed (hex) when it hangs: the Bazel replay has no artifact file.
absl::string_view current_input;

void PrintInputAndAbort() {
  std::fprintf(stderr, "service_fuzzer: the input (hex): ");
  for (char c : current_input) std::fprintf(stderr, "%02x", static_cast<uint8_t>(c));
  std::fprintf(stderr, "\n");
  std::abort();
}

void SetDeadline(grpc::ClientContext* context, absl::Duration d) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

// A unary call that ran into its deadline hung.
void CheckAnswered(const grpc::Status& status, const char* call) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "service_fuzzer: %s did not answer within %s (a hang)\n", call,
                 absl::FormatDuration(kUnaryDeadline).c_str());
    PrintInputAndAbort();
  }
}

template <typename Request, typename Response, typename Stub>
void Unary(Stub* stub,
           grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
           const char* name, absl::string_view bytes, bool may_wait = false) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  grpc::ClientContext context;
  SetDeadline(&context, may_wait ? kWaitingDeadline : kUnaryDeadline);
  Response response;
  grpc::Status status = (stub->*method)(&context, request, &response);
  if (!may_wait) CheckAnswered(status, name);
}

// A server-streaming call, read to its end.
template <typename Request, typename Response, typename Stub>
void ServerStream(Stub* stub,
                  std::unique_ptr<grpc::ClientReader<Response>> (Stub::*method)(
                      grpc::ClientContext*, const Request&),
                  const char* name, absl::string_view bytes, bool may_wait) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  grpc::ClientContext context;
  SetDeadline(&context, may_wait ? kWaitingDeadline : kUnaryDeadline);
  std::unique_ptr<grpc::ClientReader<Response>> reader = (stub->*method)(&context, request);
  Response response;
  while (reader->Read(&response)) {
  }
  grpc::Status status = reader->Finish();
  if (!may_wait) CheckAnswered(status, name);
}

// Work.Process: each message after a 2-byte little-endian length; then half-close and read to
// the end (the stream ends when its keys are answered, or at the deadline).
void Process(Harness& h, absl::string_view bytes) {
  std::vector<v1::ProcessRequest> requests;
  while (bytes.size() >= 2) {
    const size_t n = static_cast<uint8_t>(bytes[0]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[1])) << 8);
    bytes.remove_prefix(2);
    if (n > bytes.size()) return;
    v1::ProcessRequest r;
    if (!r.ParseFromArray(bytes.data(), static_cast<int>(n))) return;
    requests.push_back(std::move(r));
    bytes.remove_prefix(n);
  }
  grpc::ClientContext context;
  SetDeadline(&context, kWaitingDeadline);
  std::unique_ptr<grpc::ClientReaderWriter<v1::ProcessRequest, v1::ProcessResponse>> stream =
      h.work_stub->Process(&context);
  for (const v1::ProcessRequest& r : requests) {
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  v1::ProcessResponse response;
  while (stream->Read(&response)) {
  }
  (void)stream->Finish();
}

using Call = void (*)(Harness&, absl::string_view);
using Inf = v1::Informers::Stub;
using Que = v1::Queues::Stub;
using Adm = v1::Admin::Stub;

// Indexed by the input's first byte; append only (the seed corpus names calls by index).
constexpr Call kCalls[] = {
    // Informers
    [](Harness& h, absl::string_view b) {  // 0
      Unary(h.informers_stub.get(), &Inf::EnsureInformer, "EnsureInformer", b);
    },
    [](Harness& h, absl::string_view b) {  // 1
      Unary(h.informers_stub.get(), &Inf::DeleteInformer, "DeleteInformer", b);
    },
    [](Harness& h, absl::string_view b) {  // 2
      Unary(h.informers_stub.get(), &Inf::GetInformer, "GetInformer", b);
    },
    [](Harness& h, absl::string_view b) {  // 3
      Unary(h.informers_stub.get(), &Inf::WaitForSync, "WaitForSync", b, /*may_wait=*/true);
    },
    [](Harness& h, absl::string_view b) {  // 4
      Unary(h.informers_stub.get(), &Inf::Get, "Get", b);
    },
    [](Harness& h, absl::string_view b) {  // 5
      ServerStream(h.informers_stub.get(), &Inf::List, "List", b, /*may_wait=*/false);
    },
    [](Harness& h, absl::string_view b) {  // 6
      ServerStream(h.informers_stub.get(), &Inf::Watch, "Watch", b, /*may_wait=*/true);
    },
    // Queues
    [](Harness& h, absl::string_view b) {  // 7
      Unary(h.queues_stub.get(), &Que::CreateQueue, "CreateQueue", b);
    },
    [](Harness& h, absl::string_view b) {  // 8
      Unary(h.queues_stub.get(), &Que::UpdateQueue, "UpdateQueue", b);
    },
    [](Harness& h, absl::string_view b) {  // 9
      Unary(h.queues_stub.get(), &Que::DeleteQueue, "DeleteQueue", b);
    },
    [](Harness& h, absl::string_view b) {  // 10
      Unary(h.queues_stub.get(), &Que::GetQueue, "GetQueue", b);
    },
    [](Harness& h, absl::string_view b) {  // 11
      Unary(h.queues_stub.get(), &Que::Add, "Add", b);
    },
    [](Harness& h, absl::string_view b) {  // 12
      Unary(h.queues_stub.get(), &Que::AddAfter, "AddAfter", b);
    },
    [](Harness& h, absl::string_view b) {  // 13
      Unary(h.queues_stub.get(), &Que::AddRateLimited, "AddRateLimited", b);
    },
    [](Harness& h, absl::string_view b) {  // 14
      Unary(h.queues_stub.get(), &Que::Forget, "Forget", b);
    },
    [](Harness& h, absl::string_view b) {  // 15
      Unary(h.queues_stub.get(), &Que::NumRequeues, "NumRequeues", b);
    },
    [](Harness& h, absl::string_view b) {  // 16
      Unary(h.queues_stub.get(), &Que::Len, "Len", b);
    },
    [](Harness& h, absl::string_view b) {  // 17
      Unary(h.queues_stub.get(), &Que::ShutDown, "ShutDown", b);
    },
    // Work
    [](Harness& h, absl::string_view b) { Process(h, b); },  // 18
    // Admin
    [](Harness& h, absl::string_view b) {  // 19
      Unary(h.admin_stub.get(), &Adm::ListClusters, "ListClusters", b);
    },
    [](Harness& h, absl::string_view b) {  // 20
      Unary(h.admin_stub.get(), &Adm::ListInformers, "ListInformers", b);
    },
    [](Harness& h, absl::string_view b) {  // 21
      Unary(h.admin_stub.get(), &Adm::ListQueues, "ListQueues", b);
    },
};

}  // namespace
}  // namespace informerd::service

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace informerd::service;  // NOLINT
  if (size == 0) return 0;
  Harness& h = TheHarness();
  const Call call = kCalls[data[0] % std::size(kCalls)];
  current_input = absl::string_view(reinterpret_cast<const char*>(data), size);
  h.watchdog.Begin();
  call(h, absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  h.Reset();
  h.watchdog.End();
  return 0;
}
