// gRPC server metrics as a server interceptor, in the names of go-grpc-prometheus (what
// dashboards for gRPC services expect):
//   grpc_server_started_total{grpc_service, grpc_method, grpc_type}
//   grpc_server_handled_total{grpc_service, grpc_method, grpc_type, grpc_code}
//   grpc_server_msg_received_total / grpc_server_msg_sent_total{grpc_service, grpc_method, grpc_type}
//
// A call of a method the binary does not serve (any name a client sends) is counted under
// grpc_service="unknown", grpc_method="unknown": the series are bounded by the methods compiled in.
//
//   builder.experimental().SetInterceptorCreators(...NewGrpcMetricsInterceptorFactory(&registry));
//
// Thread safety: the factory and its interceptors may be used from any thread.
#ifndef INFORMERD_SERVER_SERVICE_GRPC_METRICS_H_
#define INFORMERD_SERVER_SERVICE_GRPC_METRICS_H_

#include <memory>

#include "base/metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace informerd::service {

// `registry` must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewGrpcMetricsInterceptorFactory(MetricsRegistry* registry);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_GRPC_METRICS_H_
