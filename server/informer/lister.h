// Lister: client-go's listers — typed reads of an informer's cache by key, by selector and by
// namespace.
//
//   Lister pods(store);
//   GetResult p = pods.Get("default/web-0");
//   ListResult web = pods.List(LabelSelector::Parse("app=web").value());
//   ListResult mine = pods.ListNamespace("team-a", LabelSelector(),
//                                        FieldSelector::Parse("spec.nodeName=n1").value());
//
// Reads are served from the cache (possibly stale, never a strong read) and, like every store
// read, report the resourceVersion the cache had reached. A namespace (given, or required by a
// `metadata.namespace=` field term) is looked up through the namespace index; selectors are then
// evaluated on each candidate.
//
// Thread safety: as the store it reads; a Lister holds no state of its own.
#ifndef INFORMERD_SERVER_INFORMER_LISTER_H_
#define INFORMERD_SERVER_INFORMER_LISTER_H_

#include "absl/strings/string_view.h"
#include "server/informer/field_selector.h"
#include "server/informer/label_selector.h"
#include "server/informer/thread_safe_store.h"

namespace informerd::informer {

class Lister {
 public:
  // REQUIRES: `store` outlives the Lister.
  explicit Lister(const ThreadSafeStore* store) : store_(store) {}

  GetResult Get(absl::string_view key) const { return store_->Get(key); }
  // Objects matching both selectors.
  ListResult List(const LabelSelector& labels,
                  const FieldSelector& fields = FieldSelector()) const;
  // Objects in `namespace_name` matching both selectors.
  ListResult ListNamespace(absl::string_view namespace_name, const LabelSelector& labels,
                           const FieldSelector& fields = FieldSelector()) const;

 private:
  static void Filter(ListResult* result, const LabelSelector& labels, const FieldSelector& fields);

  const ThreadSafeStore* const store_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_LISTER_H_
