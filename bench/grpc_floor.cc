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
//   grpc_floor --mode=events --event_bytes=500 --batch=16 --subscribers=100 --duration=3s
//       {"mode":"events","events_per_second":...,"messages_per_second":...}
//
// stream: the server writes batches of --batch keys as fast as the stream takes them; the client
// reads for --duration. bidi: the floor of a Work stream — the server keeps --window batches in
// flight and sends one more for each batch the client answers (the same keys and tokens back, as
// outcomes); keys/s answered. pingpong: sequential unary calls for --duration. events: the floor of
// Watch fan-out — --subscribers streams (one client thread each, over at most 8 channels, as
// bench/load's subscribers) to each of which the server writes one shared, once-serialized
// message of --batch events of --event_bytes each, with gRPC's callback API as informerd does;
// the events are ConfigMap-shaped informerd.v1.WatchEvents and the clients parse them as
// bench/load's subscribers do, so that the floor has the same decoding cost on the client side.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "bench/latency_histogram.h"
#include "floor/v1/floor.grpc.pb.h"
#include "informerd/v1/informers.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, mode, "stream", "stream, bidi, pingpong or events (above).");
ABSL_FLAG(int, batch, 1, "Keys (or events) per message (1..100000).");
ABSL_FLAG(int, window, 4, "bidi: batches in flight (1..1000).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(3), "How long the measured phase runs.");
ABSL_FLAG(int, event_bytes, 500, "events: bytes per event (1..1048576).");
ABSL_FLAG(int, subscribers, 100, "events: Watch-like streams (1..10000).");

namespace informerd::bench {
namespace {

namespace fv1 = ::informerd::bench::floor::v1;
namespace v1 = ::informerd::v1;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// An UPDATED informerd.v1.WatchEvent shaped like a ConfigMap's (the metadata informerd fills in,
// two labels), its JSON padded so that the event is `bytes` long (or as short as it can be).
v1::WatchEvent WatchEventOf(uint32_t i, uint32_t bytes) {
  v1::WatchEvent e;
  e.set_type(v1::WatchEvent::UPDATED);
  v1::ObjectMeta* meta = e.mutable_object()->mutable_metadata();
  meta->set_namespace_("bench-fanout");
  meta->set_name(absl::StrFormat("seed-%07d", i));
  meta->set_key(absl::StrCat(meta->namespace_(), "/", meta->name()));
  meta->set_uid("749c37e3-5a6e-4a13-a880-9115cbea372e");
  meta->set_resource_version(absl::StrCat(1000000 + i));
  meta->set_api_version("v1");
  meta->set_kind("ConfigMap");
  meta->set_creation_timestamp("2026-12-02T03:32:44Z");
  (*meta->mutable_labels())["fake.informerd.io/seed"] = "true";
  (*meta->mutable_labels())["fake.informerd.io/bucket"] = absl::StrCat(i % 10);
  // Lengths are varints: a few rounds settle the json's length.
  size_t json = 0;
  for (int round = 0; round < 4; ++round) {
    const size_t size = e.ByteSizeLong();
    if (size == bytes) break;
    json = size < bytes ? json + (bytes - size) : json - std::min(json, size - bytes);
    e.mutable_object()->set_json(std::string(json, 'x'));
  }
  return e;
}

// One Events stream: writes the shared message again each time the last write completed.
class EventsReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit EventsReactor(const grpc::ByteBuffer& message) : message_(message) {
    StartWrite(&message_);
  }
  void OnWriteDone(bool ok) override {
    if (ok) {
      StartWrite(&message_);
    } else {
      Finish(grpc::Status::OK);
    }
  }
  void OnDone() override { delete this; }

 private:
  const grpc::ByteBuffer message_;  // a copy shares the slices: no bytes copied
};

class ErrorReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ErrorReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

class FloorService final : public fv1::Floor::WithRawCallbackMethod_Events<fv1::Floor::Service> {
 public:
  // The message is serialized once, on the first call: every stream writes the same bytes.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Events(grpc::CallbackServerContext*,
                                                     const grpc::ByteBuffer* raw) override {
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (raw->Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    fv1::EventsRequest request;
    if (!request.ParseFromString(bytes) || request.event_bytes() < 1 ||
        request.event_bytes() > (1 << 20) || request.batch() < 1 || request.batch() > 100000) {
      return new ErrorReactor(grpc::Status(
          grpc::INVALID_ARGUMENT, "event_bytes: 1..1048576 and batch: 1..100000 required"));
    }
    std::call_once(once_, [&] {
      v1::WatchResponse batch;
      for (uint32_t i = 0; i < request.batch(); ++i) {
        *batch.add_events() = WatchEventOf(i, request.event_bytes());
      }
      grpc::Slice slice(batch.SerializeAsString());
      message_ = grpc::ByteBuffer(&slice, 1);
    });
    return new EventsReactor(message_);
  }

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

 private:
  std::once_flag once_;
  grpc::ByteBuffer message_;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "grpc_floor: %s\n", message.c_str());
  return 2;
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "stream" && mode != "bidi" && mode != "pingpong" && mode != "events") {
    return FlagError(IllegalValue(FLAGS_mode, "expected stream, bidi, pingpong or events"));
  }
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  for (const absl::Status& s :
       {CheckPositive(FLAGS_duration), CheckRange(FLAGS_batch, 1, 100000),
        CheckRange(FLAGS_window, 1, 1000),
        CheckRange(FLAGS_event_bytes, 1, 1 << 20), CheckRange(FLAGS_subscribers, 1, 10000)}) {
    if (!s.ok()) return FlagError(s);
  }
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  const uint32_t window = absl::GetFlag(FLAGS_window);
  const uint32_t event_bytes = absl::GetFlag(FLAGS_event_bytes);
  const int subscribers = absl::GetFlag(FLAGS_subscribers);

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

  if (mode == "events") {
    // As bench/load's subscribers: a thread each, over at most 8 channels.
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (int i = 0; i < std::min(subscribers, 8); ++i) {
      grpc::ChannelArguments args;
      args.SetInt("informerd.floor.channel", i);  // distinct arguments: a connection each
      channels.push_back(grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                                   grpc::InsecureChannelCredentials(), args));
    }
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    for (int i = 0; i < subscribers; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
    }
    std::atomic<int> open{0};
    std::atomic<uint64_t> events{0};
    std::atomic<uint64_t> messages{0};
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < subscribers; ++i) {
      threads.emplace_back([&, i] {
        fv1::EventsRequest request;
        request.set_event_bytes(event_bytes);
        request.set_batch(batch);
        // Read as the informerd.v1.WatchResponse the EventBatch is (same field 1), so that each
        // subscriber decodes what bench/load's subscribers decode.
        std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader(
            grpc::internal::ClientReaderFactory<v1::WatchResponse>::Create(
                channels[static_cast<size_t>(i) % channels.size()].get(),
                grpc::internal::RpcMethod("/informerd.bench.floor.v1.Floor/Events",
                                          grpc::internal::RpcMethod::SERVER_STREAMING),
                contexts[i].get(), request));
        v1::WatchResponse message;
        if (!reader->Read(&message)) {
          ++failed;
        }
        ++open;
        while (reader->Read(&message)) {
          events.fetch_add(static_cast<uint64_t>(message.events_size()), std::memory_order_relaxed);
          messages.fetch_add(1, std::memory_order_relaxed);
        }
        reader->Finish().IgnoreError();
      });
    }
    while (open.load() < subscribers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Counting starts once every stream has its first message.
    const uint64_t events_before = events.load();
    const uint64_t messages_before = messages.load();
    const int64_t start = NowNs();
    std::this_thread::sleep_for(std::chrono::nanoseconds(duration_ns));
    const uint64_t delivered = events.load() - events_before;
    const uint64_t written = messages.load() - messages_before;
    const int64_t now = NowNs();
    for (auto& c : contexts) c->TryCancel();
    for (std::thread& t : threads) t.join();
    if (failed.load() > 0) return Fail("an events stream ended before its first message");
    const double seconds = static_cast<double>(now - start) / 1e9;
    std::printf(
        "{\"mode\":\"events\",\"event_bytes\":%u,\"batch\":%u,\"subscribers\":%d,"
        "\"events\":%llu,\"seconds\":%.3f,\"events_per_second\":%.1f,"
        "\"messages_per_second\":%.1f}\n",
        event_bytes, batch, subscribers, static_cast<unsigned long long>(delivered), seconds,
        static_cast<double>(delivered) / seconds, static_cast<double>(written) / seconds);
  } else if (mode == "stream") {
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

int main(int argc, char** argv) {
  informerd::ParseFlags(argc, argv,
                        "bare gRPC floors of informerd's streams (stream, bidi, pingpong, "
                        "events); prints one JSON line.");
  return informerd::bench::Run();
}
