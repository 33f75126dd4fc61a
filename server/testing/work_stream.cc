#include "server/testing/work_stream.h"

namespace informerd::testing {

WorkStream::WorkStream(grpc::Channel* channel, const std::string& queue, uint32_t max_in_flight,
                       const std::string& object_informer_id)
    : stub_(v1::Work::NewStub(std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}))) {
  stream_ = stub_->Process(&context_);
  v1::ProcessRequest start;
  start.mutable_start()->set_queue(queue);
  start.mutable_start()->set_max_in_flight(max_in_flight);
  start.mutable_start()->set_worker_name("test-worker");
  start.mutable_start()->set_object_informer_id(object_informer_id);
  stream_->Write(start);
  v1::ProcessResponse started;
  ok_ = stream_->Read(&started) && started.has_started();
  epoch_ = started.started().epoch();
}

WorkStream::~WorkStream() {
  context_.TryCancel();
  stream_->Finish().IgnoreError();
}

std::vector<v1::Lease> WorkStream::Next() {
  v1::ProcessResponse r;
  while (stream_->Read(&r)) {
    if (r.has_leases()) return {r.leases().leases().begin(), r.leases().leases().end()};
  }
  return {};
}

bool WorkStream::Answer(const std::vector<v1::Lease>& leases, v1::Outcome::Result result) {
  v1::ProcessRequest req;
  for (const v1::Lease& l : leases) {
    v1::Outcome* o = req.mutable_outcomes()->add_outcomes();
    o->set_key(l.key());
    o->set_token(l.token());
    o->set_result(result);
  }
  return stream_->Write(req);
}

}  // namespace informerd::testing
