// InformerRegistry: the daemon's running informers, by id — what the Informers service creates
// and serves, what queue bindings (queue_registry.h) subscribe to, what Admin lists.
//
//   InformerRegistry informers(&clusters, {.metrics = &registry});
//   absl::StatusOr<InformerRegistry::Entry> e = informers.Ensure(spec);   // v1::InformerSpec
//   std::shared_ptr<informer::SharedInformer> inf = informers.Find(e->id);
//
// An informer is identified by its normalized spec (cluster, resolved GVR, namespace, selectors,
// transform, storage): Ensure with an equal spec returns the running one (adding any new indexes), so every
// client asking for "pods in team-a" shares one watch and one cache.
//
// Ids are stable across restarts and processes: "<resource>[.<group>]-<16 hex digits>", the hex
// digits being the 64-bit FNV-1a hash of the canonical identity (informer::InformerKey::ToString:
// cluster, group/version/resource, namespace, canonical label and field selectors, transform
// fingerprint), e.g. "deployments.apps-3f2a9c0d1b7e5a44". The readable prefix helps in logs;
// only the whole id names an informer. It runs until Delete, FreeIfUnused (the IdleReaper, for
// informers created over the API that nobody uses) or the registry is destroyed.
//
// Use: Ensure, Get and Find (every call naming an informer goes through one of them) record the
// time as the informer's last use; List does not (Admin looking is not using). An informer is in
// use while anything outside the registry holds it (a Watch stream, a queue source's mapper, a
// Work stream's object informer). Pin marks one that must never be freed (the config's).
//
// Find hands out shared_ptrs: a deleted (or freed) informer is stopped at once, and its memory
// is freed when the last holder lets go.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_SERVICE_INFORMER_REGISTRY_H_
#define INFORMERD_SERVER_SERVICE_INFORMER_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "informerd/v1/informers.pb.h"
#include "server/informer/shared_informer.h"
#include "server/service/clusters.h"

namespace informerd::service {

// NOT_FOUND "informer \"<id>\" does not exist", reason INFORMER_NOT_FOUND (metadata
// `informer_id`) and a ResourceInfo: what every call naming an unknown informer answers.
absl::Status InformerNotFound(absl::string_view id);

struct InformerRegistryOptions {
  // nullptr: no metrics. Must outlive the registry.
  MetricsRegistry* metrics = nullptr;
  // For last-use times only. nullptr: Clock::Real(). Must outlive the registry.
  Clock* clock = nullptr;
  // Passed to every informer (tests shorten these).
  informer::BackoffOptions backoff;
  absl::Duration stall_timeout = absl::Minutes(3);
};

class InformerRegistry {
 public:
  struct Entry {
    std::string id;
    // The canonical identity the id hashes (informer::InformerKey::ToString). The id's hash is no
    // proof of identity: a spec whose identity differs from a running informer's of the same id
    // is refused, never given that informer.
    std::string identity;
    // Normalized: resource resolved to a GVR (api_version/kind filled in too), defaults explicit.
    v1::InformerSpec spec;
    // The resource is namespaced (discovery).
    bool namespaced = false;
    std::shared_ptr<informer::SharedInformer> informer;
    // Shared by every copy of the entry: when the informer was last used, whether it is pinned.
    struct Usage {
      std::atomic<int64_t> last_used_unix_ns{0};
      std::atomic<bool> pinned{false};
    };
    std::shared_ptr<Usage> usage;
    absl::Time last_used() const {
      return usage == nullptr ? absl::UnixEpoch()
                              : absl::FromUnixNanos(usage->last_used_unix_ns.load());
    }
    bool pinned() const { return usage != nullptr && usage->pinned.load(); }
  };

  InformerRegistry(Clusters* clusters, InformerRegistryOptions options);
  ~InformerRegistry();  // Stops every informer.

  // The running informer for `spec`, started if there is none. Errors carry their reason
  // (status.h): INVALID_FIELD naming the field ("spec.resource.version: required",
  // "spec.label_selector: ...", "spec.indexes[1].name: ..."), CLUSTER_NOT_FOUND or
  // RESOURCE_NOT_FOUND (NOT_FOUND), NO_CLUSTER (FAILED_PRECONDITION), INDEX_CONFLICT for an index
  // name already used with another definition; discovery failures keep the client's error
  // (API_SERVER_ERROR when the API server refused) and are recorded as the cluster's last error.
  //
  // `admit`, if set, is asked once the resource is resolved and before anything is built or
  // changed, with the resource, the informer's id and whether it runs already; its error is
  // returned as is (authorization and per-caller limits). It runs on the calling thread with no
  // lock held, and may block.
  using Admission = std::function<absl::Status(const client::ResourceInfo& resource,
                                               const std::string& id, bool exists)>;
  absl::StatusOr<Entry> Ensure(const v1::InformerSpec& spec, const Admission& admit = nullptr);
  // What Ensure checks without asking an API server: every field of the spec, and that its
  // cluster is configured. Returns the configured cluster's name ("" resolved to the default);
  // the same errors as Ensure.
  absl::StatusOr<std::string> Check(const v1::InformerSpec& spec) const;
  // The configured cluster `name` means ("" is the default): INVALID_FIELD (spec.cluster) for a
  // name that is no DNS-1123 label, CLUSTER_NOT_FOUND (prefixed "spec.cluster: ") for one that is
  // not configured, NO_CLUSTER when none is.
  absl::StatusOr<std::string> ResolveCluster(absl::string_view name) const;
  // InformerNotFound(id) when there is no such informer.
  absl::StatusOr<Entry> Get(absl::string_view id) const;
  // What an informer reads, for authorization: cheaper than Get (no spec copy, no use recorded).
  struct Scope {
    std::string cluster;  // the configured cluster's name
    std::string group;
    std::string version;
    std::string resource;
    std::string namespace_name;  // "" for all namespaces
    bool namespaced = false;     // the resource is
  };
  absl::StatusOr<Scope> GetScope(absl::string_view id) const;
  // nullptr when there is no such informer.
  std::shared_ptr<informer::SharedInformer> Find(absl::string_view id) const;
  // Stops and forgets the informer. InformerNotFound(id) when there is no such informer.
  absl::Status Delete(absl::string_view id);
  std::vector<Entry> List() const;

  // Marks the informer as never to be freed for want of use. InformerNotFound(id) when unknown.
  absl::Status Pin(absl::string_view id);
  // Records a use now (when it is in use without calls, e.g. a long Watch stream).
  void Touch(absl::string_view id);
  // Stops and forgets the informer if it is not pinned, was last used at or before `cutoff` and
  // nothing outside the registry holds it, checked atomically with Find/Get/Ensure (a call that
  // finds it first keeps it). Returns whether it was freed.
  bool FreeIfUnused(absl::string_view id, absl::Time cutoff);

 private:
  void TouchLocked(const Entry& entry) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Clusters::Cluster*> FindCluster(absl::string_view name) const;

  Clusters* const clusters_;
  const InformerRegistryOptions options_;
  Clock* const clock_;
  // Serialises Ensure and Delete (which talk to discovery and build or stop informers) so that
  // two Ensures of one spec never both build; never held by readers. Taken before mu_.
  Mutex change_mu_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> informers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_INFORMER_REGISTRY_H_
