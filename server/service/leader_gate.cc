#include "server/service/leader_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "informerd/v1/errors.pb.h"
#include "server/service/status.h"

namespace informerd::service {

void LeaderGate::Lead(SteadyTime deadline) {
  deadline_.store(deadline.time_since_epoch().count(), std::memory_order_release);
  leading_.store(true, std::memory_order_release);
}

void LeaderGate::Renewed(SteadyTime deadline) {
  if (!leading_.load(std::memory_order_acquire)) return;
  int64_t ticks = deadline.time_since_epoch().count();
  int64_t now = deadline_.load(std::memory_order_acquire);
  while (ticks > now && !deadline_.compare_exchange_weak(now, ticks, std::memory_order_acq_rel)) {
  }
}

void LeaderGate::Follow(std::string leader, std::string address) {
  NotDispatching(std::move(leader), std::move(address), /*restoring=*/false);
}

void LeaderGate::Restoring(std::string self, std::string address) {
  NotDispatching(std::move(self), std::move(address), /*restoring=*/true);
}

void LeaderGate::NotDispatching(std::string leader, std::string address, bool restoring) {
  leading_.store(false, std::memory_order_release);
  MutexLock l(&mu_);
  leader_ = std::move(leader);
  leader_address_ = std::move(address);
  restoring_ = restoring;
}

absl::Status LeaderGate::Check() const {
  if (MayDispatch()) return absl::OkStatus();
  MutexLock l(&mu_);
  if (leading_.load(std::memory_order_acquire)) {
    // Leading, past the deadline: the elector has not caught up; nobody is known to lead.
    return NotLeaderError("", "");
  }
  if (restoring_) {
    return Error(absl::StatusCode::kUnavailable, v1::NOT_LEADER,
                 absl::StrCat("this replica (\"", leader_, "\") leads its replica set but has not "
                              "restored its queues yet; retry"),
                 {{"leader", leader_}, {"leader_address", leader_address_}});
  }
  return NotLeaderError(leader_, leader_address_);
}

absl::Status NotLeaderError(const std::string& leader, const std::string& address) {
  std::string message =
      leader.empty()
          ? std::string("this replica does not lead its replica set and no leader is known yet; "
                        "retry")
          : absl::StrCat("this replica does not lead its replica set; the leader is \"", leader,
                         "\"", address.empty() ? "" : absl::StrCat(" at ", address));
  return Error(absl::StatusCode::kUnavailable, v1::NOT_LEADER, message,
               {{"leader", leader}, {"leader_address", address}});
}

}  // namespace informerd::service
