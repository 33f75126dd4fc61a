#include "server/service/grpc_metrics.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/status.h"

namespace informerd::service {
namespace {

using grpc::experimental::InterceptionHookPoints;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "Canceled";
    case grpc::UNKNOWN: return "Unknown";
    case grpc::INVALID_ARGUMENT: return "InvalidArgument";
    case grpc::DEADLINE_EXCEEDED: return "DeadlineExceeded";
    case grpc::NOT_FOUND: return "NotFound";
    case grpc::ALREADY_EXISTS: return "AlreadyExists";
    case grpc::PERMISSION_DENIED: return "PermissionDenied";
    case grpc::RESOURCE_EXHAUSTED: return "ResourceExhausted";
    case grpc::FAILED_PRECONDITION: return "FailedPrecondition";
    case grpc::ABORTED: return "Aborted";
    case grpc::OUT_OF_RANGE: return "OutOfRange";
    case grpc::UNIMPLEMENTED: return "Unimplemented";
    case grpc::INTERNAL: return "Internal";
    case grpc::UNAVAILABLE: return "Unavailable";
    case grpc::DATA_LOSS: return "DataLoss";
    case grpc::UNAUTHENTICATED: return "Unauthenticated";
    default: return "Unknown";
  }
}

const char* TypeName(grpc::experimental::ServerRpcInfo::Type type) {
  using Type = grpc::experimental::ServerRpcInfo::Type;
  switch (type) {
    case Type::UNARY: return "unary";
    case Type::CLIENT_STREAMING: return "client_stream";
    case Type::SERVER_STREAMING: return "server_stream";
    case Type::BIDI_STREAMING: return "bidi_stream";
  }
  return "unknown";
}

// One method's series, looked up once per method rather than once per call.
struct MethodSeries {
  Labels labels;
  Counter* started = nullptr;
  Counter* received = nullptr;
  Counter* sent = nullptr;
  // By status code, filled in as codes occur.
  Counter* handled[17] = {};
};

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(MetricsRegistry* registry, MethodSeries* series)
      : registry_(registry), series_(series) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      series_->started->Inc();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      series_->received->Inc();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      series_->sent->Inc();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::StatusCode code = methods->GetSendStatus().error_code();
      const size_t i = static_cast<size_t>(code) < 17 ? static_cast<size_t>(code) : 2;
      // Racing first uses store the same pointer: the registry returns one series per labels.
      Counter* handled = __atomic_load_n(&series_->handled[i], __ATOMIC_ACQUIRE);
      if (handled == nullptr) {
        Labels labels = series_->labels;
        labels.emplace_back("grpc_code", CodeName(code));
        handled = registry_->GetCounter("grpc_server_handled_total",
                                        "RPCs completed on the server, by status code.", labels);
        __atomic_store_n(&series_->handled[i], handled, __ATOMIC_RELEASE);
      }
      handled->Inc();
    }
    methods->Proceed();
  }

 private:
  MetricsRegistry* const registry_;
  MethodSeries* const series_;
};

// Whether `method` ("/package.Service/Method") is a method of a service whose descriptor is linked
// into this binary (every service the daemon registers: informerd.v1, health, reflection).
bool IsServed(absl::string_view method) {
  if (method.size() < 4 || method[0] != '/') return false;
  method.remove_prefix(1);
  const size_t slash = method.find('/');
  if (slash == absl::string_view::npos) return false;
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(method.substr(0, slash)));
  return service != nullptr &&
         service->FindMethodByName(std::string(method.substr(slash + 1))) != nullptr;
}

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(MetricsRegistry* registry) : registry_(registry) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(registry_, Series(info));
  }

 private:
  MethodSeries* Series(grpc::experimental::ServerRpcInfo* info) {
    absl::string_view method = info->method() != nullptr ? info->method() : "";
    MutexLock lock(&mu_);
    if (auto it = series_.find(method); it != series_.end()) return it->second.get();
    // A name the server does not serve (a client may send any) shares one series, and is never
    // a key here: labels come only from the methods compiled in, so no client can add series.
    if (!IsServed(method)) method = "/unknown/unknown";
    std::unique_ptr<MethodSeries>& series = series_[method];
    if (series != nullptr) return series.get();
    series = std::make_unique<MethodSeries>();
    // "/informerd.v1.Queues/Add" -> service "informerd.v1.Queues", method "Add".
    absl::string_view full = method;
    if (!full.empty() && full[0] == '/') full.remove_prefix(1);
    const size_t slash = full.find('/');
    series->labels = {
        {"grpc_service", std::string(full.substr(0, slash))},
        {"grpc_method", slash == absl::string_view::npos ? "" : std::string(full.substr(slash + 1))},
        {"grpc_type", TypeName(info->type())}};
    series->started = registry_->GetCounter("grpc_server_started_total",
                                            "RPCs started on the server.", series->labels);
    series->received = registry_->GetCounter(
        "grpc_server_msg_received_total", "Stream messages received by the server.", series->labels);
    series->sent = registry_->GetCounter("grpc_server_msg_sent_total",
                                         "Stream messages sent by the server.", series->labels);
    return series.get();
  }

  MetricsRegistry* const registry_;
  Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<MethodSeries>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewGrpcMetricsInterceptorFactory(MetricsRegistry* registry) {
  return std::make_unique<MetricsInterceptorFactory>(registry);
}

}  // namespace informerd::service
