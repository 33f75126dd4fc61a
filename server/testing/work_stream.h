// WorkStream: a Work.Process stream driven from a test — started on a queue, reading leases and
// answering them; cancelled when destroyed (which gives its keys back).
//
//   WorkStream worker(channel.get(), "pods", /*max_in_flight=*/10);
//   std::vector<v1::Lease> leases = worker.Next();
//   worker.Answer(leases, v1::Outcome::SUCCESS);
//
// Thread safety: one thread drives it (context() may be cancelled from any).
#ifndef INFORMERD_SERVER_TESTING_WORK_STREAM_H_
#define INFORMERD_SERVER_TESTING_WORK_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "informerd/v1/work.grpc.pb.h"

namespace informerd::testing {

class WorkStream {
 public:
  // Starts the stream (worker name "test-worker"); `object_informer_id` as Start's. ok() says
  // whether Started came back.
  WorkStream(grpc::Channel* channel, const std::string& queue, uint32_t max_in_flight,
             const std::string& object_informer_id = "");
  ~WorkStream();
  WorkStream(const WorkStream&) = delete;
  WorkStream& operator=(const WorkStream&) = delete;

  bool ok() const { return ok_; }
  // Started.epoch: the daemon process's.
  uint64_t epoch() const { return epoch_; }
  // The next batch of leases (blocks; empty at the stream's end).
  std::vector<v1::Lease> Next();
  // One outcome of `result` per lease; false when the stream is gone.
  bool Answer(const std::vector<v1::Lease>& leases, v1::Outcome::Result result);
  grpc::ClientContext& context() { return context_; }

 private:
  std::unique_ptr<v1::Work::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ProcessRequest, v1::ProcessResponse>> stream_;
  bool ok_ = false;
  uint64_t epoch_ = 0;
};

}  // namespace informerd::testing

#endif  // INFORMERD_SERVER_TESTING_WORK_STREAM_H_
