#include "server/informer/shared_informer_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::informer {

std::string InformerKey::ToString() const {
  return absl::StrCat(cluster, "|", resource.group.empty() ? "" : resource.group + "/",
                      resource.version, "/", resource.resource, "|", namespace_name, "|",
                      label_selector, "|", field_selector, "|", transform);
}

SharedInformerFactory::~SharedInformerFactory() = default;

std::shared_ptr<SharedInformer> SharedInformerFactory::Find(const InformerKey& key) {
  MutexLock lock(&shared_->mu);
  auto it = shared_->informers.find(key.ToString());
  return it == shared_->informers.end() ? nullptr : it->second.lock();
}

absl::StatusOr<std::shared_ptr<SharedInformer>> SharedInformerFactory::Acquire(
    const InformerKey& key, const Builder& build) {
  const std::string id = key.ToString();
  if (std::shared_ptr<SharedInformer> running = Find(key)) return running;
  MutexLock build_lock(&build_mu_);
  if (std::shared_ptr<SharedInformer> running = Find(key)) return running;  // built meanwhile
  absl::StatusOr<std::unique_ptr<SharedInformer>> built = build();
  if (!built.ok()) return built.status();
  if (absl::Status started = (*built)->Start(); !started.ok()) return started;
  std::weak_ptr<Shared> shared = shared_;
  std::shared_ptr<SharedInformer> informer(
      built->release(), [shared, id](SharedInformer* informer) {
        if (std::shared_ptr<Shared> s = shared.lock()) {
          MutexLock lock(&s->mu);
          auto it = s->informers.find(id);
          // Forget it unless the entry already names a newer informer of the same key.
          if (it != s->informers.end() && it->second.expired()) s->informers.erase(it);
        }
        delete informer;  // stops it and frees its cache
      });
  MutexLock lock(&shared_->mu);
  shared_->informers[id] = informer;
  return informer;
}

std::vector<SharedInformerFactory::Entry> SharedInformerFactory::List() {
  std::vector<Entry> entries;
  MutexLock lock(&shared_->mu);
  for (const auto& [key, weak] : shared_->informers) {
    if (std::shared_ptr<SharedInformer> informer = weak.lock()) {
      entries.push_back(Entry{key, std::move(informer)});
    }
  }
  return entries;
}

size_t SharedInformerFactory::size() { return List().size(); }

}  // namespace informerd::informer
