// QueueStore: the specs of queues created over the API, kept in the cluster so that a replica
// set's next leader recreates them (docs/high-availability.md). Each is a Queue object of
// informerd's own API group — informerd.io/v1alpha1, namespaced, in the Lease's namespace — named
// after the queue, labelled informerd.io/lease=<lease name>, whose `spec` is the
// informerd.v1.QueueSpec in proto JSON. deploy/crd/queues.informerd.io.yaml installs the CRD.
// The specs of the informers its sources read go along, in the annotation informerd.io/informers
// (a JSON array of informerd.v1.InformerSpec): informers created over the API run only where a
// client ensured them, so a new leader ensures them from there before it creates the queue (an
// informer's id is a function of its spec, so the sources' ids stay valid).
//
// Terms: each object names, in the annotation informerd.io/epoch, the epoch of the leader's term
// that last wrote it. BeginTerm(epoch) is this replica's term; Claim stamps a stored object with
// it (a new leader claims every object it restores). Save and Remove read the object, refuse one
// a later term wrote (UNAVAILABLE, NOT_LEADER: a deposed leader's late write never lands over its
// successor's), and write conditionally on the resourceVersion read, reading again on a
// conflict. Ordering writes of one queue among themselves is the caller's (the registry holds a
// lock per queue across its change and the write).
//
//   QueueStore store(client, {.namespace_name = "informerd", .lease_name = "informerd"});
//   store.BeginTerm(term.epoch);
//   absl::StatusOr<std::vector<StoredQueue>> all = store.List();
//   store.Claim(all->front());             // restore: this term owns it now
//   store.Save(spec);                      // create or replace
//   store.Remove("pods");
//
// Errors: the API server's (NOT_FOUND with a hint when the CRD is not installed). A stored object
// whose spec is not a QueueSpec is returned with its parse error, naming the object, not dropped
// silently and never fatal.
//
// Thread safety: every method may be called from any thread; each blocks on the API server for
// at most `request_timeout` per request.
#ifndef INFORMERD_SERVER_HA_QUEUE_STORE_H_
#define INFORMERD_SERVER_HA_QUEUE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "informerd/v1/informers.pb.h"
#include "informerd/v1/queues.pb.h"
#include "server/service/queue_registry.h"

namespace informerd::ha {

// The label selecting one replica set's stored queues.
inline constexpr absl::string_view kLeaseLabel = "informerd.io/lease";
// The annotation with the specs of the informers a stored queue's sources read.
inline constexpr absl::string_view kInformersAnnotation = "informerd.io/informers";
// The annotation with the epoch of the term that last wrote a stored queue (also the Lease's:
// leader_elector.h).
inline constexpr absl::string_view kEpochAnnotation = "informerd.io/epoch";

struct QueueStoreOptions {
  std::string namespace_name = "default";
  std::string lease_name = "informerd";
  absl::Duration request_timeout = absl::Seconds(10);
  // The spec of a running informer by id (nullopt: unknown); nullptr: none are stored.
  std::function<std::optional<v1::InformerSpec>(const std::string& id)> informer_spec;
};

// One stored object: its spec, or why it is not one.
struct StoredQueue {
  std::string name;
  absl::StatusOr<v1::QueueSpec> spec;
  // The informers its sources read, as stored (an annotation that does not parse: its error).
  absl::StatusOr<std::vector<v1::InformerSpec>> informers;
  // The epoch of the term that last wrote it (0: none recorded, or not a number).
  uint64_t epoch = 0;
  std::string resource_version;
};

// The stored object for `spec`, and the spec parsed back from an object's `spec` JSON.
std::string QueueObjectJson(const QueueStoreOptions& options, const v1::QueueSpec& spec,
                            const std::vector<v1::InformerSpec>& informers, uint64_t epoch,
                            absl::string_view resource_version);
absl::StatusOr<v1::QueueSpec> ParseStoredSpec(absl::string_view object_name,
                                              absl::string_view spec_json);
absl::StatusOr<std::vector<v1::InformerSpec>> ParseStoredInformers(absl::string_view object_name,
                                                                   absl::string_view json);

class QueueStore final : public service::QueueSpecStore {
 public:
  // `client` must outlive the store.
  QueueStore(client::Client* client, QueueStoreOptions options);

  // This replica's term from now on; writes name it, and refuse objects of later terms.
  void BeginTerm(uint64_t epoch) { epoch_.store(epoch, std::memory_order_release); }

  absl::Status Save(const v1::QueueSpec& spec) override;
  absl::Status Remove(const std::string& name) override;
  absl::StatusOr<std::vector<StoredQueue>> List();
  // The highest epoch any stored object of this replica set names (0: none).
  absl::StatusOr<uint64_t> HighestEpoch();
  // Stamps `stored` (as listed) with this term's epoch, reading it again after a conflict;
  // returns the object as claimed. UNAVAILABLE (NOT_LEADER) when a later term wrote it, NOT_FOUND
  // when it was removed meanwhile.
  absl::StatusOr<StoredQueue> Claim(StoredQueue stored);

 private:
  absl::StatusOr<client::Client::RawResponse> Send(std::string method, std::string path,
                                                   std::string body);
  // GET one object: nullopt when there is none.
  absl::StatusOr<std::optional<StoredQueue>> Read(const std::string& name);
  // NOT_LEADER when `stored` was written by a term after this replica's.
  absl::Status CheckTerm(const StoredQueue& stored, uint64_t epoch) const;
  std::string Collection() const;
  // The specs of the informers `spec`'s sources read, as far as they are known.
  std::vector<v1::InformerSpec> InformersOf(const v1::QueueSpec& spec) const;

  client::Client* const client_;
  const QueueStoreOptions options_;
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace informerd::ha

#endif  // INFORMERD_SERVER_HA_QUEUE_STORE_H_
