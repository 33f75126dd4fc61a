// ApiCallLanes: where the services run calls that may wait on an API server (discovery for
// EnsureInformer, owner kinds for CreateQueue), so that no gRPC callback thread ever blocks on
// one. Each cluster has a lane: one thread and a bounded FIFO of calls. A cluster whose API
// server hangs stalls only its own lane; reads, Work streams, health and Admin never enter a
// lane, and calls for other clusters run on theirs.
//
//   lanes.Run<v1::InformerInfo>(context, reactor, response, "prod",
//       [=]() -> absl::StatusOr<v1::InformerInfo> { return EnsureSlowly(spec); });
//
// Every call ends by its deadline: the earlier of `max_wait` (Options) and the gRPC call's
// deadline less a margin (a tenth of the time left, at most 200 ms, so that the caller reads this
// status rather than its own library's timeout). If the work has not finished by then, the call is answered DEADLINE_EXCEEDED
// (reason TIMEOUT, metadata `cluster`) at once — by a timer, not by the lane — and the work's
// result, when it comes, is dropped (the work itself is not interrupted: it is bounded by the
// client's own request timeouts). A call whose deadline passes while it waits in the lane is
// answered and never runs. A full lane answers RESOURCE_EXHAUSTED at once.
//
// Lanes are made on first use and live until the object is destroyed. A call names its cluster as
// the client wrote it; `Options::resolve` turns that into the configured cluster's name (so "" and
// the default cluster's name share a lane) or refuses it at once (CLUSTER_NOT_FOUND), before any
// lane, thread or copy of the name is made: the number of lanes is bounded by the clusters the
// daemon is configured with, whatever names its clients send.
//
// Thread safety: Run may be called from any thread. The destructor answers waiting calls
// UNAVAILABLE and joins the lanes' threads (waiting for the calls running on them).
#ifndef INFORMERD_SERVER_SERVICE_API_CALL_LANES_H_
#define INFORMERD_SERVER_SERVICE_API_CALL_LANES_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "server/service/status.h"

namespace informerd::service {

class ApiCallLanes {
 public:
  struct Options {
    // nullptr: Clock::Real(). Must outlive the lanes.
    Clock* clock = nullptr;
    // A call waits at most this long, whatever its gRPC deadline.
    absl::Duration max_wait = absl::Seconds(30);
    // Calls waiting in one lane at most (RESOURCE_EXHAUSTED beyond).
    size_t max_queued = 1000;
    // The configured cluster a call's cluster name means, or why there is none (answered as the
    // call's status). nullptr: names are taken as they are (a caller that only passes names of
    // configured clusters).
    std::function<absl::StatusOr<std::string>(absl::string_view)> resolve;
  };

  explicit ApiCallLanes(Options options);
  ~ApiCallLanes();
  ApiCallLanes(const ApiCallLanes&) = delete;
  ApiCallLanes& operator=(const ApiCallLanes&) = delete;

  // Runs `work` on the lane of `cluster` and answers the unary call with its result (copied into
  // `*response`), or with an error by the deadline. Returns `reactor` for the service method to
  // return.
  template <typename Response>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                Response* response, absl::string_view cluster,
                                absl::AnyInvocable<absl::StatusOr<Response>()> work) {
    return Run(context, context->DefaultReactor(), response, cluster, std::move(work));
  }
  // The same with the call's reactor already made (by a caller that obtained it before).
  template <typename Response>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                grpc::ServerUnaryReactor* reactor, Response* response,
                                absl::string_view cluster,
                                absl::AnyInvocable<absl::StatusOr<Response>()> work) {
    absl::StatusOr<std::string> lane = Resolve(cluster);
    if (!lane.ok()) {
      reactor->Finish(ToGrpc(lane.status()));
      return reactor;
    }
    auto call = std::make_shared<Call>(reactor, *std::move(lane));
    call->answer = [response, work = std::move(work)](Call& c) mutable {
      absl::StatusOr<Response> result = work();
      // Copied only if the call is still ours to answer (the response belongs to gRPC).
      return c.Finish(result.status(), [&] {
        if (result.ok()) *response = *std::move(result);
      });
    };
    Submit(std::move(call), DeadlineOf(*context));
    return reactor;
  }

  // Lanes made so far (for tests and Admin).
  size_t lanes() const;

 private:
  // One call: answered exactly once, by its work, its deadline, or shutdown.
  struct Call {
    Call(grpc::ServerUnaryReactor* reactor, std::string cluster)
        : reactor(reactor), cluster(std::move(cluster)) {}
    // Answers with `status` unless already answered, running `fill` first when `status` is OK;
    // returns whether this call answered.
    template <typename Fill>
    bool Finish(const absl::Status& status, Fill fill) {
      {
        MutexLock lock(&mu);
        if (answered) return false;
        answered = true;
      }
      if (status.ok()) fill();
      reactor->Finish(ToGrpc(status));
      return true;
    }
    bool Finish(const absl::Status& status) {
      return Finish(status, [] {});
    }

    grpc::ServerUnaryReactor* const reactor;
    const std::string cluster;
    absl::AnyInvocable<bool(Call&)> answer;  // runs the work and answers
    std::unique_ptr<Timer> deadline_timer;
    absl::Time deadline;
    Mutex mu;
    bool answered ABSL_GUARDED_BY(mu) = false;
  };
  struct Lane {
    std::deque<std::shared_ptr<Call>> queue;  // guarded by ApiCallLanes::mu_
    std::thread thread;
  };

  static absl::Time DeadlineOf(const grpc::CallbackServerContext& context);
  absl::StatusOr<std::string> Resolve(absl::string_view cluster) const;
  void Submit(std::shared_ptr<Call> call, absl::Time call_deadline);
  void RunLane(Lane* lane);

  const Options options_;
  Clock* const clock_;
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_API_CALL_LANES_H_
