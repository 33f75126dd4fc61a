// hold_worker: a worker process for end-to-end tests. It opens a Work stream on a queue and prints
// "held: KEY TOKEN" for every key it receives, answering none (a worker stuck mid-item), until it
// is killed. With --answer it answers each key with SUCCESS instead and prints "done: KEY".
// With --answer and --hold_ms it "reconciles" each batch for that long first, printing
// "begin: KEY TOKEN NS" and "end: KEY TOKEN NS" around it (NS: CLOCK_MONOTONIC nanoseconds, the
// same clock in every process of the machine, so an oracle can compare workers' logs). Refused
// outcomes print "refused: KEY TOKEN MESSAGE".
//
//   hold_worker --target=127.0.0.1:7470 --queue=q --max_in_flight=4 [--answer [--hold_ms=20]]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <string>

#include "absl/flags/flag.h"
#include "base/flags.h"
#include "grpcpp/grpcpp.h"
#include "informerd/v1/work.grpc.pb.h"

ABSL_FLAG(std::string, target, "", "The daemon's gRPC address (required).");
ABSL_FLAG(std::string, queue, "", "The queue to work on (required).");
ABSL_FLAG(int, max_in_flight, 1, "Keys held at once (1..10000).");
ABSL_FLAG(bool, answer, false, "Answer each key with SUCCESS instead of holding it.");
ABSL_FLAG(int, hold_ms, 0, "With --answer: reconcile each batch this long first (0..600000).");

int main(int argc, char** argv) {
  informerd::ParseFlags(argc, argv,
                        "a worker process for end-to-end tests: holds (or answers) the keys of "
                        "one Work stream, printing each.");
  if (absl::GetFlag(FLAGS_target).empty()) {
    return informerd::FlagError(informerd::MissingFlag(FLAGS_target, "host:port"));
  }
  if (absl::GetFlag(FLAGS_queue).empty()) {
    return informerd::FlagError(informerd::MissingFlag(FLAGS_queue, "the queue's name"));
  }
  for (const absl::Status& s : {informerd::CheckRange(FLAGS_max_in_flight, 1, 10000),
                                informerd::CheckRange(FLAGS_hold_ms, 0, 600000)}) {
    if (!s.ok()) return informerd::FlagError(s);
  }
  const uint32_t max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  const bool answer = absl::GetFlag(FLAGS_answer);
  const int hold_ms = absl::GetFlag(FLAGS_hold_ms);
  auto now_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  };
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials());
  auto stub = informerd::v1::Work::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Process(&context);
  informerd::v1::ProcessRequest start;
  start.mutable_start()->set_queue(absl::GetFlag(FLAGS_queue));
  start.mutable_start()->set_max_in_flight(max_in_flight);
  start.mutable_start()->set_worker_name("hold_worker");
  if (!stream->Write(start)) {
    std::fprintf(stderr, "hold_worker: cannot start the stream\n");
    return 1;
  }
  informerd::v1::ProcessResponse response;
  while (stream->Read(&response)) {
    if (response.has_started()) {
      std::printf("started: %s\n", response.started().stream_id().c_str());
    }
    for (const informerd::v1::Refusal& r : response.refusals().refusals()) {
      std::printf("refused: %s %llu %s\n", r.key().c_str(),
                  static_cast<unsigned long long>(r.token()), r.message().c_str());
    }
    if (!response.has_leases()) {
      std::fflush(stdout);
      continue;
    }
    if (answer && hold_ms > 0) {
      for (const informerd::v1::Lease& lease : response.leases().leases()) {
        std::printf("begin: %s %llu %lld\n", lease.key().c_str(),
                    static_cast<unsigned long long>(lease.token()), now_ns());
      }
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      for (const informerd::v1::Lease& lease : response.leases().leases()) {
        std::printf("end: %s %llu %lld\n", lease.key().c_str(),
                    static_cast<unsigned long long>(lease.token()), now_ns());
      }
    }
    informerd::v1::ProcessRequest outcomes;
    for (const informerd::v1::Lease& lease : response.leases().leases()) {
      if (answer) {
        informerd::v1::Outcome* o = outcomes.mutable_outcomes()->add_outcomes();
        o->set_key(lease.key());
        o->set_token(lease.token());
        o->set_result(informerd::v1::Outcome::SUCCESS);
        std::printf("done: %s\n", lease.key().c_str());
      } else {
        std::printf("held: %s %llu\n", lease.key().c_str(),
                    static_cast<unsigned long long>(lease.token()));
      }
    }
    std::fflush(stdout);
    if (answer && !stream->Write(outcomes)) break;
  }
  const grpc::Status status = stream->Finish();
  std::printf("ended: %d %s\n", status.error_code(), status.error_message().c_str());
  return 0;
}
