// SharedInformerFactory: one running SharedInformer per identity — (cluster, group/version/
// resource, namespace, label selector, field selector, transform) — shared by everyone who asks
// for the same (client-go's SharedInformerFactory, with runtime start and stop).
//
//   SharedInformerFactory factory;
//   InformerKey key{.cluster = "prod", .resource = {"", "v1", "pods"}, .namespace_name = "a"};
//   std::shared_ptr<SharedInformer> pods = factory.Acquire(key, [&] { return Build(key); }).value();
//   ... pods->AddEventHandler(...) ...
//   pods.reset();  // the last user gone: the informer stops and its memory is freed
//
// Acquire creates and starts the informer on first use; later Acquires of an equal key get the
// same one. An informer lives while any shared_ptr to it does; dropping the last one stops it (on
// the dropping thread, which must not be one of its handlers' threads) and forgets it.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_INFORMER_SHARED_INFORMER_FACTORY_H_
#define INFORMERD_SERVER_INFORMER_SHARED_INFORMER_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "client/discovery.h"
#include "server/informer/shared_informer.h"

namespace informerd::informer {

struct InformerKey {
  std::string cluster;
  client::GroupVersionResource resource;
  std::string namespace_name;
  std::string label_selector;
  std::string field_selector;
  // Transform::fingerprint() of the informer's transform.
  std::string transform;

  // A canonical, readable identity, e.g. "prod|apps/v1/deployments|team-a|app=web||drop(...)".
  std::string ToString() const;
  bool operator==(const InformerKey&) const = default;
};

class SharedInformerFactory {
 public:
  using Builder = std::function<absl::StatusOr<std::unique_ptr<SharedInformer>>()>;

  SharedInformerFactory() = default;
  // REQUIRES: no informer acquired from it is still held.
  ~SharedInformerFactory();
  SharedInformerFactory(const SharedInformerFactory&) = delete;
  SharedInformerFactory& operator=(const SharedInformerFactory&) = delete;

  // The running informer for `key`, built with `build` and started if there is none. Errors of
  // `build` or Start are returned (and nothing is kept).
  absl::StatusOr<std::shared_ptr<SharedInformer>> Acquire(const InformerKey& key,
                                                          const Builder& build);
  // The running informer for `key`, if any (it stays alive while the result is held).
  std::shared_ptr<SharedInformer> Find(const InformerKey& key);

  struct Entry {
    std::string key;
    std::shared_ptr<SharedInformer> informer;
  };
  // Every running informer.
  std::vector<Entry> List();
  size_t size();

 private:
  struct Shared {
    Mutex mu;
    absl::flat_hash_map<std::string, std::weak_ptr<SharedInformer>> informers ABSL_GUARDED_BY(mu);
  };
  // Outlives the factory if informers do (the deleters reference it).
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  // Serialises builds, so that two Acquires of one key never both build.
  Mutex build_mu_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_SHARED_INFORMER_FACTORY_H_
