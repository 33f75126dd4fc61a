// grpc_floor: what bare gRPC costs on loopback, the floor the service benchmarks are reported
// against (tools/bench_service). One process runs a sync gRPC server on 127.0.0.1:0 and a client
// over TCP; the messages are shaped like informerd.v1.Leases (key + token).
//
//   grpc_floor --mode=stream --batch=16 --duration=3s
//       {"mode":"stream","batch":16,"messages_per_second":...,"keys_per_second":...}
//   grpc_floor --mode=bidi --batch=128 --window=4 --duration=3s
//       {"mode":"bidi","batch":128,"window":4,"keys_per_second":...}
//   grpc_floor --mode=pingpong --duration=3s
//       {"mode":"pingpong","round_trips":...,"p50_us":...,"p99_us":...}
//
// stream: the server writes batches of --batch keys as fast as the stream takes them; the client
// reads for --duration. bidi: the floor of a Work stream — the server keeps --window batches in
// flight and sends one more for each batch the client answers (the same keys and tokens back, as
// outcomes); keys/s answered. pingpong: sequential unary calls for --duration.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/latency_histogram.h"
#include "floor/v1/floor.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace informerd::bench {
namespace {

namespace fv1 = ::informerd::bench::floor::v1;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class FloorService final : public fv1::Floor::Service {
 public:
  grpc::Status Stream(grpc::ServerContext* context, const fv1::StreamRequest* request,
                      grpc::ServerWriter<fv1::Batch>* writer) override {
    if (request->batch() < 1 || request->batch() > 100000) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "batch: must be in 1..100000");
    }
    fv1::Batch batch;
    uint64_t token = 0;
    for (uint32_t i = 0; i < request->batch(); ++i) {
      fv1::Item* item = batch.add_items();
      item->set_key(absl::StrFormat("load/key-%08d", i));
      item->set_token(++token);
    }
    while (!context->IsCancelled()) {
      for (fv1::Item& item : *batch.mutable_items()) item.set_token(++token);
      if (!writer->Write(batch)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status Exchange(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<fv1::Batch, fv1::ExchangeMessage>* stream) override {
    fv1::ExchangeMessage in;
    if (!stream->Read(&in) || !in.has_start()) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "start: the first message must be start");
    }
    const uint32_t size = in.start().batch();
    const uint32_t window = in.start().window();
    if (size < 1 || size > 100000 || window < 1 || window > 1000) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "start: batch in 1..100000, window in 1..1000");
    }
    fv1::Batch batch;
    uint64_t token = 0;
    for (uint32_t i = 0; i < size; ++i) {
      batch.add_items()->set_key(absl::StrFormat("load/key-%08d", i));
    }
    auto send = [&] {
      for (fv1::Item& item : *batch.mutable_items()) item.set_token(++token);
      return stream->Write(batch);
    };
    for (uint32_t i = 0; i < window; ++i) {
      if (!send()) return grpc::Status::OK;
    }
    while (!context->IsCancelled() && stream->Read(&in)) {
      if (!send()) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status Ping(grpc::ServerContext*, const fv1::PingMessage* request,
                    fv1::PingMessage* response) override {
    response->set_sequence(request->sequence());
    return grpc::Status::OK;
  }
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "grpc_floor: %s\n", message.c_str());
  return 2;
}

int Run(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"mode", "stream"}, {"batch", "1"}, {"window", "4"}, {"duration", "3s"}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--") || arg.find('=') == std::string::npos) {
      return Fail(absl::StrCat("expected --flag=value, got \"", arg, "\""));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq - 2);
    if (!flags.contains(name)) return Fail(absl::StrCat("unknown flag --", name));
    flags[name] = arg.substr(eq + 1);
  }
  uint32_t batch = 0;
  if (!absl::SimpleAtoi(flags["batch"], &batch) || batch < 1 || batch > 100000) {
    return Fail("--batch: expected an integer in 1..100000");
  }
  absl::Duration duration;
  if (!absl::ParseDuration(flags["duration"], &duration) || duration <= absl::ZeroDuration()) {
    return Fail("--duration: expected a positive duration such as 3s");
  }
  uint32_t window = 0;
  if (!absl::SimpleAtoi(flags["window"], &window) || window < 1 || window > 1000) {
    return Fail("--window: expected an integer in 1..1000");
  }
  const std::string mode = flags["mode"];
  if (mode != "stream" && mode != "bidi" && mode != "pingpong") {
    return Fail("--mode: expected stream, bidi or pingpong");
  }

  FloorService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail("cannot listen on 127.0.0.1:0");
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = fv1::Floor::NewStub(channel);
  const int64_t duration_ns = absl::ToInt64Nanoseconds(duration);

  if (mode == "stream") {
    grpc::ClientContext context;
    fv1::StreamRequest request;
    request.set_batch(batch);
    auto reader = stub->Stream(&context, request);
    fv1::Batch message;
    // The first message opens the stream; counting starts after it.
    if (!reader->Read(&message)) return Fail("the stream ended before its first message");
    uint64_t messages = 0;
    uint64_t keys = 0;
    const int64_t start = NowNs();
    int64_t now = start;
    while (now - start < duration_ns && reader->Read(&message)) {
      ++messages;
      keys += static_cast<uint64_t>(message.items_size());
      if ((messages & 63) == 0) now = NowNs();
    }
    now = NowNs();
    context.TryCancel();
    while (reader->Read(&message)) {
    }
    reader->Finish().IgnoreError();
    const double seconds = static_cast<double>(now - start) / 1e9;
    std::printf(
        "{\"mode\":\"stream\",\"batch\":%u,\"messages\":%llu,\"seconds\":%.3f,"
        "\"messages_per_second\":%.1f,\"keys_per_second\":%.1f}\n",
        batch, static_cast<unsigned long long>(messages), seconds,
        static_cast<double>(messages) / seconds, static_cast<double>(keys) / seconds);
  } else if (mode == "bidi") {
    grpc::ClientContext context;
    auto stream = stub->Exchange(&context);
    fv1::ExchangeMessage start;
    start.mutable_start()->set_batch(batch);
    start.mutable_start()->set_window(window);
    if (!stream->Write(start)) return Fail("the exchange ended before its start");
    fv1::Batch message;
    fv1::ExchangeMessage answer;
    auto exchange = [&] {
      if (!stream->Read(&message)) return false;
      answer.mutable_answer()->Swap(&message);  // the same keys and tokens back
      return stream->Write(answer);
    };
    // The first window opens the stream; counting starts after it.
    for (uint32_t i = 0; i < window; ++i) {
      if (!exchange()) return Fail("the exchange ended early");
    }
    uint64_t messages = 0;
    uint64_t keys = 0;
    const int64_t start_ns = NowNs();
    int64_t now = start_ns;
    while (now - start_ns < duration_ns && exchange()) {
      ++messages;
      keys += static_cast<uint64_t>(answer.answer().items_size());
      if ((messages & 15) == 0) now = NowNs();
    }
    now = NowNs();
    context.TryCancel();
    while (stream->Read(&message)) {
    }
    stream->Finish().IgnoreError();
    const double seconds = static_cast<double>(now - start_ns) / 1e9;
    std::printf(
        "{\"mode\":\"bidi\",\"batch\":%u,\"window\":%u,\"messages\":%llu,\"seconds\":%.3f,"
        "\"messages_per_second\":%.1f,\"keys_per_second\":%.1f}\n",
        batch, window, static_cast<unsigned long long>(messages), seconds,
        static_cast<double>(messages) / seconds, static_cast<double>(keys) / seconds);
  } else {
    LatencyHistogram histogram;
    fv1::PingMessage request;
    fv1::PingMessage response;
    // Warm the connection up.
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext context;
      if (!stub->Ping(&context, request, &response).ok()) return Fail("ping failed");
    }
    const int64_t start = NowNs();
    int64_t now = start;
    while (now - start < duration_ns) {
      grpc::ClientContext context;
      request.set_sequence(request.sequence() + 1);
      const int64_t before = NowNs();
      if (!stub->Ping(&context, request, &response).ok()) return Fail("ping failed");
      now = NowNs();
      histogram.Record(now - before);
    }
    std::printf(
        "{\"mode\":\"pingpong\",\"round_trips\":%llu,\"p50_us\":%.1f,\"p90_us\":%.1f,"
        "\"p99_us\":%.1f}\n",
        static_cast<unsigned long long>(histogram.count()), histogram.Percentile(50) / 1e3,
        histogram.Percentile(90) / 1e3, histogram.Percentile(99) / 1e3);
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace
}  // namespace informerd::bench

int main(int argc, char** argv) { return informerd::bench::Run(argc, argv); }
