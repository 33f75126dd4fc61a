// Discovery: which resources the API server serves — group/version/resource (GVR) to Kind and
// scope and back — cached, and fetched again when asked for something it does not know, so
// that resources added later (CRDs) resolve.
//
// It reads aggregated discovery (apidiscovery.k8s.io/v2: two requests, /api and /apis) when
// the server offers it, else the legacy documents (/api, /api/v1, /apis, /apis/G/V), as
// client-go's discovery client does.
//
//   auto discovery = Discovery::Create({.fetch = ...}).value();
//   absl::StatusOr<ResourceInfo> pods = discovery->Resource({"", "v1", "pods"});
//   // pods->kind == "Pod", pods->namespaced
//
// Thread safety: all methods may be called from any thread; a refresh blocks (in `fetch`) and
// concurrent callers wait for it.
#ifndef INFORMERD_CLIENT_DISCOVERY_H_
#define INFORMERD_CLIENT_DISCOVERY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/token_bucket.h"

namespace informerd::client {

struct GroupVersionResource {
  std::string group;  // "" for the core group
  std::string version;
  std::string resource;  // plural, e.g. "deployments"
  std::string GroupVersion() const { return group.empty() ? version : group + "/" + version; }
  bool operator==(const GroupVersionResource&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const GroupVersionResource& r) {
    return H::combine(std::move(h), r.group, r.version, r.resource);
  }
};

struct GroupVersionKind {
  std::string group;
  std::string version;
  std::string kind;
  bool operator==(const GroupVersionKind&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const GroupVersionKind& k) {
    return H::combine(std::move(h), k.group, k.version, k.kind);
  }
};

struct ResourceInfo {
  GroupVersionResource gvr;
  std::string kind;
  bool namespaced = false;
  std::string singular;
  std::vector<std::string> verbs;
  std::vector<std::string> short_names;
  // The URL path of the group version: "/api/v1" or "/apis/apps/v1".
  std::string BasePath() const;
};

class Discovery {
 public:
  struct Response {
    std::string content_type;
    std::string body;
  };
  // GETs `path` with the given Accept header; provided by the client (with auth and retries).
  using Fetch = std::function<absl::StatusOr<Response>(const std::string& path,
                                                       const std::string& accept)>;
  struct Options {
    Fetch fetch;
    // Ask for aggregated discovery first (falling back to legacy when not offered).
    bool aggregated = true;
    // A lookup that misses refreshes everything once (a CRD created since is then found), but
    // such refreshes are rate-limited: `miss_refresh_burst` at once, then one per
    // `miss_refresh_interval`. Past that a miss is answered NotFound from what was fetched last,
    // so that lookups of names that do not exist (a client trying random names) cost the API
    // server at most one discovery per interval.
    int miss_refresh_burst = 3;
    absl::Duration miss_refresh_interval = absl::Seconds(1);
  };

  static absl::StatusOr<std::unique_ptr<Discovery>> Create(Options options);

  // The resource `gvr` (subresources like "pods/status" are not resources). Refreshes once on a
  // miss (within the rate limit of Options); NotFound if the server does not serve it.
  absl::StatusOr<ResourceInfo> Resource(const GroupVersionResource& gvr);
  // The resource whose kind is `gvk` (the first listed, as the server orders them).
  absl::StatusOr<ResourceInfo> ResourceForKind(const GroupVersionKind& gvk);
  // The resources of kind `kind` in API group `group` (nullopt: in any group), one per version
  // served. Refreshes once when there is none; NotFound if the server serves no such kind.
  absl::StatusOr<std::vector<ResourceInfo>> ResourcesForGroupKind(
      const std::optional<std::string>& group, absl::string_view kind);
  // Fetches everything again.
  absl::Status Refresh();
  // How many times discovery was fetched (for tests).
  int refreshes() const;

 private:
  explicit Discovery(Options options);
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `find()` (a std::optional) on what is loaded; on a miss, refreshes (first load: always; later:
  // if the miss limit allows) and asks again. nullopt: still missing.
  template <typename T, typename Find>
  absl::StatusOr<std::optional<T>> LookupLocked(Find find) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  int refreshes_ ABSL_GUARDED_BY(mu_) = 0;
  TokenBucket miss_refreshes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<GroupVersionResource, ResourceInfo> by_resource_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<GroupVersionKind, GroupVersionResource> by_kind_ ABSL_GUARDED_BY(mu_);
};

// Parses an APIGroupDiscoveryList (aggregated discovery) into resources. Exposed for tests.
absl::StatusOr<std::vector<ResourceInfo>> ParseAggregatedDiscovery(absl::string_view json);
// Parses an APIResourceList (legacy discovery of one group version). Exposed for tests.
absl::StatusOr<std::vector<ResourceInfo>> ParseResourceList(absl::string_view json);

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_DISCOVERY_H_
