#include "server/service/api_call_lanes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace informerd::service {

ApiCallLanes::ApiCallLanes(Options options)
    : options_(options), clock_(options.clock != nullptr ? options.clock : Clock::Real()) {}

ApiCallLanes::~ApiCallLanes() {
  std::vector<std::shared_ptr<Call>> waiting;
  std::vector<Lane*> lanes;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [name, lane] : lanes_) {
      for (auto& c : lane->queue) waiting.push_back(std::move(c));
      lane->queue.clear();
      lanes.push_back(lane.get());
    }
  }
  for (auto& c : waiting) {
    c->deadline_timer.reset();
    c->Finish(Error(absl::StatusCode::kUnavailable, v1::DAEMON_SHUTTING_DOWN,
                    "informerd is shutting down"));
  }
  for (Lane* lane : lanes) lane->thread.join();
}

absl::Time ApiCallLanes::DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

absl::StatusOr<std::string> ApiCallLanes::Resolve(absl::string_view cluster) const {
  if (options_.resolve == nullptr) return std::string(cluster);
  return options_.resolve(cluster);
}

void ApiCallLanes::Submit(std::shared_ptr<Call> call, absl::Time call_deadline) {
  // The gRPC deadline is wall time; our timers run on the injected clock: convert the remaining
  // time, so that a test's fake clock and a real deadline agree.
  // Answer a little before the caller's own deadline, so that it reads our status (which names
  // the cluster) rather than its library's bare "Deadline Exceeded".
  absl::Duration left = call_deadline - absl::Now();
  left -= std::min(absl::Milliseconds(200), left / 10);
  left = std::min(left, options_.max_wait);
  call->deadline = clock_->Now() + std::max(left, absl::ZeroDuration());
  std::weak_ptr<Call> weak = call;
  const absl::Duration waited = std::max(left, absl::ZeroDuration());
  call->deadline_timer = clock_->CreateTimer([weak, waited] {
    if (std::shared_ptr<Call> c = weak.lock()) {
      c->Finish(Error(absl::StatusCode::kDeadlineExceeded, v1::TIMEOUT,
                      absl::StrCat("no answer from the API server of cluster \"", c->cluster,
                                   "\" within ", absl::FormatDuration(waited)),
                      {{"cluster", c->cluster}}));
    }
  });
  call->deadline_timer->ArmAt(call->deadline);
  MutexLock lock(&mu_);
  if (stopping_) {
    call->Finish(Error(absl::StatusCode::kUnavailable, v1::DAEMON_SHUTTING_DOWN,
                       "informerd is shutting down"));
    return;
  }
  std::unique_ptr<Lane>& lane = lanes_[call->cluster];
  if (lane == nullptr) {
    lane = std::make_unique<Lane>();
    Lane* l = lane.get();
    l->thread = std::thread([this, l] { RunLane(l); });
  }
  if (lane->queue.size() >= options_.max_queued) {
    call->Finish(Error(absl::StatusCode::kResourceExhausted, v1::RESOURCE_EXHAUSTED,
                       absl::StrCat(lane->queue.size(), " calls already wait for cluster \"",
                                    call->cluster, "\""),
                       {{"cluster", call->cluster}}));
    return;
  }
  lane->queue.push_back(std::move(call));
}

void ApiCallLanes::RunLane(Lane* lane) {
  for (;;) {
    std::shared_ptr<Call> call;
    {
      MutexLock lock(&mu_);
      mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !lane->queue.empty();
      });
      if (lane->queue.empty()) return;  // stopping
      call = std::move(lane->queue.front());
      lane->queue.pop_front();
    }
    bool answered;
    {
      MutexLock lock(&call->mu);
      answered = call->answered;
    }
    // A call answered by its deadline while it waited does not run.
    if (!answered) call->answer(*call);
    call->deadline_timer.reset();  // waits for a firing timer; none fires after
  }
}

size_t ApiCallLanes::lanes() const {
  MutexLock lock(&mu_);
  return lanes_.size();
}

}  // namespace informerd::service
