// InformerRegistry: see informer_registry.h.
//
// Ensure runs in three steps, so that a bad request costs no network round trip: (1) validate
// every field and compile selectors, indexes and the transform; (2) find the cluster and resolve
// the resource through discovery; (3) compute the identity and return the running informer or
// build, start and remember a new one.
#include "server/service/informer_registry.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "server/informer/client_lister_watcher.h"
#include "server/informer/field_selector.h"
#include "server/informer/index.h"
#include "server/informer/label_selector.h"
#include "server/informer/informer_key.h"
#include "server/informer/transform.h"
#include "server/service/names.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

// Stable across processes and releases (absl::Hash is seeded per process): FNV-1a, 64 bits.
uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// What step (1) of Ensure produces.
struct Validated {
  client::GroupVersionResource gvr;  // version empty: resolve api_version + kind
  client::GroupVersionKind gvk;
  std::string label_selector;  // canonical
  std::string field_selector;  // canonical
  std::vector<informer::IndexSpec> indexes;
  informer::TransformOptions transform;
  std::string transform_fingerprint;
  informer::StoreCompression compression = informer::StoreCompression::kNone;
};

absl::StatusOr<informer::IndexSpec> ConvertIndex(const v1::IndexSpec& in, const std::string& field) {
  if (std::string reason = Dns1123SubdomainError(in.name(), kMaxDns1123LabelSize);
      !reason.empty()) {
    return InvalidField(field + ".name", reason);
  }
  if (in.name() == informer::kNamespaceIndex) {
    return InvalidField(field + ".name", "\"namespace\" is the built-in namespace index");
  }
  informer::IndexSpec out;
  switch (in.kind_case()) {
    case v1::IndexSpec::kLabelKey:
      if (in.label_key().empty()) return InvalidField(field + ".label_key", "required");
      if (std::string reason = informer::InvalidLabelKeyReason(in.label_key()); !reason.empty()) {
        return InvalidField(field + ".label_key", reason);
      }
      out = informer::IndexSpec::Label(in.name(), in.label_key());
      break;
    case v1::IndexSpec::kFieldPath:
      if (in.field_path().empty()) return InvalidField(field + ".field_path", "required");
      out = informer::IndexSpec::Field(in.name(), in.field_path());
      break;
    case v1::IndexSpec::kOwner:
      out = informer::IndexSpec::Owner(
          in.name(), {.kind = in.owner().kind(),
                      .by = in.owner().by_uid() ? informer::OwnerIndex::By::kUid
                                                : informer::OwnerIndex::By::kKindName,
                      .controller_only = !in.owner().all_owners()});
      break;
    case v1::IndexSpec::KIND_NOT_SET:
      return InvalidField(field, "one of label_key, field_path or owner is required");
  }
  // Compiling checks what is left (field path syntax).
  if (absl::StatusOr<std::unique_ptr<informer::IndexFunction>> compiled =
          informer::IndexFunction::Create(out);
      !compiled.ok()) {
    const char* part = in.kind_case() == v1::IndexSpec::kFieldPath ? ".field_path" : "";
    return InvalidField(field + part, compiled.status().message());
  }
  return out;
}

absl::StatusOr<Validated> Validate(const v1::InformerSpec& spec) {
  Validated v;
  const bool by_resource = spec.has_resource() &&
                           (!spec.resource().group().empty() || !spec.resource().version().empty() ||
                            !spec.resource().resource().empty());
  const bool by_kind = !spec.api_version().empty() || !spec.kind().empty();
  if (by_resource && by_kind) {
    return InvalidField("spec.api_version",
                        "give either spec.resource or spec.api_version and spec.kind, not both");
  }
  if (!by_resource && !by_kind) {
    return InvalidField("spec.resource", "required (or spec.api_version and spec.kind)");
  }
  if (by_resource) {
    const v1::GroupVersionResource& r = spec.resource();
    if (std::string reason = r.group().empty() ? "" : Dns1123SubdomainError(r.group());
        !reason.empty()) {
      return InvalidField("spec.resource.group", reason);
    }
    if (std::string reason = Dns1123LabelError(r.version()); !reason.empty()) {
      return InvalidField("spec.resource.version", reason);
    }
    if (std::string reason = Dns1123SubdomainError(r.resource(), kMaxDns1123LabelSize);
        !reason.empty()) {
      return InvalidField("spec.resource.resource", reason);
    }
    v.gvr = {r.group(), r.version(), r.resource()};
  } else {
    if (spec.api_version().empty()) {
      return InvalidField("spec.api_version", "required with spec.kind");
    }
    if (spec.kind().empty()) return InvalidField("spec.kind", "required with spec.api_version");
    std::vector<std::string> parts = absl::StrSplit(spec.api_version(), '/');
    if (parts.size() > 2 || parts.back().empty() || (parts.size() == 2 && parts[0].empty())) {
      return InvalidField("spec.api_version",
                          absl::StrCat("\"", spec.api_version(),
                                       "\": want \"group/version\" or \"version\""));
    }
    for (const std::string& part : parts) {
      if (std::string reason = Dns1123SubdomainError(part); !reason.empty()) {
        return InvalidField("spec.api_version", reason);
      }
    }
    for (char c : spec.kind()) {
      if (!absl::ascii_isalnum(c)) {
        return InvalidField("spec.kind",
                            absl::StrCat("\"", spec.kind(), "\": letters and digits only"));
      }
    }
    v.gvk = {parts.size() == 2 ? parts[0] : "", parts.back(), spec.kind()};
  }
  if (std::string reason =
          spec.namespace_().empty() ? "" : Dns1123LabelError(spec.namespace_());
      !reason.empty()) {
    return InvalidField("spec.namespace", reason);
  }
  absl::StatusOr<informer::LabelSelector> labels =
      informer::LabelSelector::Parse(spec.label_selector());
  if (!labels.ok()) return InvalidField("spec.label_selector", labels.status().message());
  v.label_selector = labels->ToString();
  absl::StatusOr<informer::FieldSelector> fields =
      informer::FieldSelector::Parse(spec.field_selector());
  if (!fields.ok()) return InvalidField("spec.field_selector", fields.status().message());
  v.field_selector = fields->ToString();
  for (int i = 0; i < spec.indexes_size(); ++i) {
    const std::string field = absl::StrCat("spec.indexes[", i, "]");
    absl::StatusOr<informer::IndexSpec> index = ConvertIndex(spec.indexes(i), field);
    if (!index.ok()) return index.status();
    for (const informer::IndexSpec& earlier : v.indexes) {
      if (earlier.name == index->name) {
        return InvalidField(field + ".name", absl::StrCat("\"", index->name, "\" is used twice"));
      }
    }
    v.indexes.push_back(*std::move(index));
  }
  const v1::TransformSpec& t = spec.transform();
  v.transform = {.strip_managed_fields = !t.keep_managed_fields(),
                 .drop_paths = {t.drop_paths().begin(), t.drop_paths().end()},
                 .keep_paths = {t.keep_paths().begin(), t.keep_paths().end()},
                 .metadata_only = t.metadata_only()};
  absl::StatusOr<std::unique_ptr<informer::Transform>> transform =
      informer::Transform::Create(v.transform);
  if (!transform.ok()) return InvalidField("spec.transform", transform.status().message());
  v.transform_fingerprint = (*transform)->fingerprint();
  switch (spec.storage().compression()) {
    case v1::StorageSpec::COMPRESSION_UNSPECIFIED:
    case v1::StorageSpec::COMPRESSION_NONE:
      break;
    case v1::StorageSpec::COMPRESSION_ZSTD:
      v.compression = informer::StoreCompression::kZstd;
      break;
    default:  // a number this daemon does not know (a newer client's)
      return InvalidField("spec.storage.compression",
                          absl::StrCat("unknown value ", spec.storage().compression(),
                                       " (COMPRESSION_NONE or COMPRESSION_ZSTD)"));
  }
  return v;
}

v1::IndexSpec* FindIndex(v1::InformerSpec& spec, absl::string_view name) {
  for (v1::IndexSpec& index : *spec.mutable_indexes()) {
    if (index.name() == name) return &index;
  }
  return nullptr;
}

}  // namespace

absl::Status InformerNotFound(absl::string_view id) {
  return WithResource(Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND,
                            absl::StrCat("informer \"", id, "\" does not exist"),
                            {{"informer_id", id}}),
                      "informer", id, "does not exist");
}

InformerRegistry::InformerRegistry(Clusters* clusters, InformerRegistryOptions options)
    : clusters_(clusters),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {}

void InformerRegistry::TouchLocked(const Entry& entry) const {
  entry.usage->last_used_unix_ns.store(absl::ToUnixNanos(clock_->Now()));
}

InformerRegistry::~InformerRegistry() {
  absl::flat_hash_map<std::string, Entry> informers;
  {
    MutexLock lock(&mu_);
    informers.swap(informers_);
  }
  for (auto& [id, entry] : informers) entry.informer->Stop();
}

absl::StatusOr<Clusters::Cluster*> InformerRegistry::FindCluster(absl::string_view name) const {
  // Checked before the lookup, so that no error echoes an unbounded name.
  if (!name.empty()) {
    if (std::string reason = Dns1123LabelError(name); !reason.empty()) {
      return InvalidField("spec.cluster", reason);
    }
  }
  absl::StatusOr<Clusters::Cluster*> cluster = clusters_->Find(name);
  if (!cluster.ok() && cluster.status().code() == absl::StatusCode::kNotFound) {
    return Prefixed("spec.cluster: ", cluster.status());
  }
  return cluster;
}

absl::StatusOr<std::string> InformerRegistry::ResolveCluster(absl::string_view name) const {
  absl::StatusOr<Clusters::Cluster*> cluster = FindCluster(name);
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->name;
}

absl::StatusOr<std::string> InformerRegistry::Check(const v1::InformerSpec& spec) const {
  if (absl::StatusOr<Validated> v = Validate(spec); !v.ok()) return v.status();
  return ResolveCluster(spec.cluster());
}

absl::StatusOr<InformerRegistry::Entry> InformerRegistry::Ensure(const v1::InformerSpec& spec,
                                                                 const Admission& admit) {
  absl::StatusOr<Validated> v = Validate(spec);
  if (!v.ok()) return v.status();
  absl::StatusOr<Clusters::Cluster*> cluster = FindCluster(spec.cluster());
  if (!cluster.ok()) return cluster.status();
  client::Discovery& discovery = (*cluster)->client->discovery();
  const bool by_kind = v->gvr.version.empty();
  absl::StatusOr<client::ResourceInfo> info =
      by_kind ? discovery.ResourceForKind(v->gvk) : discovery.Resource(v->gvr);
  if (!info.ok()) {
    const absl::string_view field = by_kind ? "spec.kind" : "spec.resource";
    const std::string message = absl::StrCat(field, ": ", info.status().message());
    if (info.status().code() == absl::StatusCode::kNotFound) {
      const std::string& name = (*cluster)->name;
      return by_kind ? Error(absl::StatusCode::kNotFound, v1::RESOURCE_NOT_FOUND, message,
                             {{"field", field}, {"cluster", name},
                              {"api_version", spec.api_version()}, {"kind", spec.kind()}})
                     : Error(absl::StatusCode::kNotFound, v1::RESOURCE_NOT_FOUND, message,
                             {{"field", field}, {"cluster", name}, {"group", v->gvr.group},
                              {"version", v->gvr.version}, {"resource", v->gvr.resource}});
    }
    // The API server could not be asked, or refused: the cluster's trouble, not the request's.
    (*cluster)->RecordError(info.status());
    return Prefixed(absl::StrCat(field, ": cluster \"", (*cluster)->name, "\": "), info.status());
  }
  if (!info->namespaced && !spec.namespace_().empty()) {
    return InvalidField("spec.namespace", absl::StrCat(info->gvr.resource, " are cluster-scoped"));
  }

  informer::InformerKey key{.cluster = (*cluster)->name,
                            .resource = info->gvr,
                            .namespace_name = spec.namespace_(),
                            .label_selector = v->label_selector,
                            .field_selector = v->field_selector,
                            .transform = v->transform_fingerprint,
                            .compressed = v->compression != informer::StoreCompression::kNone};
  std::string identity = key.ToString();
  const std::string id = absl::StrFormat(
      "%s%s-%016x", info->gvr.resource, info->gvr.group.empty() ? "" : "." + info->gvr.group,
      Fnv1a64(identity));
  // Two identities of one id (a hash collision, found by chance or crafted): the spec is refused,
  // so that nobody is handed an informer of a scope other than the one they were authorized for.
  auto collision = [&](const Entry& running) -> absl::Status {
    if (running.identity == identity) return absl::OkStatus();
    return Error(absl::StatusCode::kFailedPrecondition, v1::INVALID_FIELD,
                 absl::StrCat("spec: its informer id ", id,
                              " is taken by an informer of another spec (an id hash collision); "
                              "change the spec (a selector term, say) to get another id"),
                 {{"field", "spec"}, {"informer_id", id}});
  };

  if (admit != nullptr) {
    bool exists = false;
    {
      MutexLock lock(&mu_);
      if (auto it = informers_.find(id); it != informers_.end()) {
        if (absl::Status s = collision(it->second); !s.ok()) return s;
        exists = true;
      }
    }
    if (absl::Status s = admit(*info, id, exists); !s.ok()) return s;
  }

  MutexLock change_lock(&change_mu_);
  Entry existing;
  {
    MutexLock lock(&mu_);
    if (auto it = informers_.find(id); it != informers_.end()) {
      if (absl::Status s = collision(it->second); !s.ok()) return s;
      existing = it->second;
      TouchLocked(existing);
    }
  }
  if (existing.informer != nullptr) {
    // The running informer: add the indexes it does not have yet.
    std::vector<informer::IndexSpec> added;
    for (int i = 0; i < spec.indexes_size(); ++i) {
      const v1::IndexSpec* have = FindIndex(existing.spec, spec.indexes(i).name());
      if (have == nullptr) {
        added.push_back(v->indexes[i]);
        continue;
      }
      if (have->SerializeAsString() != spec.indexes(i).SerializeAsString()) {
        const std::string field = absl::StrCat("spec.indexes[", i, "].name");
        return Error(absl::StatusCode::kFailedPrecondition, v1::INDEX_CONFLICT,
                     absl::StrCat(field, ": informer ", id, " already has an index \"",
                                  have->name(), "\" with another definition (",
                                  have->ShortDebugString(), ")"),
                     {{"field", field}, {"informer_id", id}, {"index", have->name()}});
      }
    }
    if (added.empty()) return existing;
    if (absl::Status s = existing.informer->AddIndexers(added); !s.ok()) {
      return Prefixed("spec.indexes: ", s);
    }
    MutexLock lock(&mu_);
    Entry& entry = informers_[id];
    for (int i = 0; i < spec.indexes_size(); ++i) {
      if (FindIndex(entry.spec, spec.indexes(i).name()) == nullptr) {
        *entry.spec.add_indexes() = spec.indexes(i);
      }
    }
    return entry;
  }

  Entry entry;
  entry.id = id;
  entry.identity = std::move(identity);
  entry.spec = spec;
  entry.spec.set_cluster((*cluster)->name);
  entry.spec.mutable_resource()->set_group(info->gvr.group);
  entry.spec.mutable_resource()->set_version(info->gvr.version);
  entry.spec.mutable_resource()->set_resource(info->gvr.resource);
  entry.spec.set_api_version(info->gvr.GroupVersion());
  entry.spec.set_kind(info->kind);
  entry.namespaced = info->namespaced;
  entry.spec.set_label_selector(v->label_selector);
  entry.spec.set_field_selector(v->field_selector);
  // COMPRESSION_NONE is the default: normalized away, so that equal specs read alike.
  if (v->compression == informer::StoreCompression::kNone) entry.spec.clear_storage();

  absl::StatusOr<std::unique_ptr<informer::ClientListerWatcher>> lw =
      informer::ClientListerWatcher::Create({.client = (*cluster)->client.get(),
                                             .resource = info->gvr,
                                             .namespace_name = spec.namespace_(),
                                             .label_selector = v->label_selector,
                                             .field_selector = v->field_selector,
                                             .drop_managed_fields =
                                                 v->transform.strip_managed_fields});
  if (!lw.ok()) return lw.status();
  informer::SharedInformerOptions options;
  options.name = id;
  options.lister_watcher = *std::move(lw);
  options.expected_kind = info->kind;
  options.indexers = std::move(v->indexes);
  options.transform = std::move(v->transform);
  options.compression = v->compression;
  options.backoff = options_.backoff;
  options.stall_timeout = options_.stall_timeout;
  options.metrics = options_.metrics;
  options.reflector_executor = (*cluster)->reflector_executor();
  absl::StatusOr<std::unique_ptr<informer::SharedInformer>> built =
      informer::SharedInformer::Create(std::move(options));
  if (!built.ok()) return built.status();
  if (absl::Status started = (*built)->Start(); !started.ok()) return started;
  entry.informer = *std::move(built);
  entry.usage = std::make_shared<Entry::Usage>();
  MutexLock lock(&mu_);
  TouchLocked(entry);
  informers_[id] = entry;
  return entry;
}

absl::StatusOr<InformerRegistry::Entry> InformerRegistry::Get(absl::string_view id) const {
  MutexLock lock(&mu_);
  auto it = informers_.find(id);
  if (it == informers_.end()) return InformerNotFound(id);
  TouchLocked(it->second);
  return it->second;
}

absl::StatusOr<InformerRegistry::Scope> InformerRegistry::GetScope(absl::string_view id) const {
  MutexLock lock(&mu_);
  auto it = informers_.find(id);
  if (it == informers_.end()) return InformerNotFound(id);
  const v1::GroupVersionResource& r = it->second.spec.resource();
  return Scope{.cluster = it->second.spec.cluster(),
               .group = r.group(),
               .version = r.version(),
               .resource = r.resource(),
               .namespace_name = it->second.spec.namespace_(),
               .namespaced = it->second.namespaced};
}

std::shared_ptr<informer::SharedInformer> InformerRegistry::Find(absl::string_view id) const {
  MutexLock lock(&mu_);
  auto it = informers_.find(id);
  if (it == informers_.end()) return nullptr;
  TouchLocked(it->second);
  return it->second.informer;
}

absl::Status InformerRegistry::Delete(absl::string_view id) {
  MutexLock change_lock(&change_mu_);
  std::shared_ptr<informer::SharedInformer> informer;
  {
    MutexLock lock(&mu_);
    auto it = informers_.find(id);
    if (it == informers_.end()) return InformerNotFound(id);
    informer = std::move(it->second.informer);
    informers_.erase(it);
  }
  // Stopped now, whoever still holds it; freed when the last holder lets go.
  informer->Stop();
  return absl::OkStatus();
}

absl::Status InformerRegistry::Pin(absl::string_view id) {
  MutexLock lock(&mu_);
  auto it = informers_.find(id);
  if (it == informers_.end()) return InformerNotFound(id);
  it->second.usage->pinned.store(true);
  return absl::OkStatus();
}

void InformerRegistry::Touch(absl::string_view id) {
  MutexLock lock(&mu_);
  if (auto it = informers_.find(id); it != informers_.end()) TouchLocked(it->second);
}

bool InformerRegistry::FreeIfUnused(absl::string_view id, absl::Time cutoff) {
  MutexLock change_lock(&change_mu_);
  std::shared_ptr<informer::SharedInformer> informer;
  {
    MutexLock lock(&mu_);
    auto it = informers_.find(id);
    if (it == informers_.end()) return false;
    const Entry& e = it->second;
    // use_count: the entry's own reference is the only one.
    if (e.pinned() || e.last_used() > cutoff || e.informer.use_count() > 1) return false;
    informer = std::move(it->second.informer);
    informers_.erase(it);
  }
  informer->Stop();
  return true;
}

std::vector<InformerRegistry::Entry> InformerRegistry::List() const {
  std::vector<Entry> entries;
  MutexLock lock(&mu_);
  entries.reserve(informers_.size());
  for (const auto& [id, entry] : informers_) entries.push_back(entry);
  return entries;
}

}  // namespace informerd::service
