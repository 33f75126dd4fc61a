// GuardOptions: how informerd authenticates and authorizes its callers (guard.h does it), as the
// configuration sets it (server/config.h: insecureAllowUnauthenticated, authentication,
// authorization, callerLimits).
//
// Thread safety: plain values.
#ifndef INFORMERD_SERVER_AUTH_OPTIONS_H_
#define INFORMERD_SERVER_AUTH_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"

namespace informerd::auth {

struct CallerLimits {
  int informers = 50;
  int queues = 50;
  int streams = 200;
  int in_flight = 100;
  // Watch streams of one informer (a shared informer has 256 in all).
  int watchers_per_informer = 64;
};

struct UnixPeerMapping {
  uint32_t uid = 0;
  std::string user;
  std::vector<std::string> groups;
};

struct GuardOptions {
  // Nothing checked; everything allowed (local development only).
  bool insecure_allow_unauthenticated = false;
  // TokenReview spec.audiences (empty: the API server's own).
  std::vector<std::string> audiences;
  absl::Duration token_ttl = absl::Seconds(10);
  absl::Duration allow_ttl = absl::Seconds(10);
  absl::Duration deny_ttl = absl::Seconds(10);
  size_t cache_size = 10000;
  absl::Duration review_timeout = absl::Seconds(5);
  int review_threads = 4;
  size_t max_pending = 10000;
  // Of those, from one client address (its IP; every unix-socket peer counts as one).
  size_t max_pending_per_peer = 1000;
  std::vector<UnixPeerMapping> unix_peers;
  CallerLimits limits;
  // nullptr: Clock::Real(). Must outlive the guard.
  Clock* clock = nullptr;
};

}  // namespace informerd::auth

#endif  // INFORMERD_SERVER_AUTH_OPTIONS_H_
