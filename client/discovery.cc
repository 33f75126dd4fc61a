#include "client/discovery.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "simdjson.h"

namespace informerd::client {
namespace {

namespace od = simdjson::ondemand;

constexpr char kAggregatedAccept[] =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

absl::Status Bad(absl::string_view what, simdjson::error_code err) {
  return absl::DataLossError(absl::StrCat("discovery: ", what, ": ", simdjson::error_message(err)));
}

// Calls f(key, value) for each field of the object `v`.
template <typename F>
simdjson::error_code ForEachField(od::value v, F f) {
  od::object obj;
  if (auto err = v.get_object().get(obj)) return err;
  for (auto field : obj) {
    std::string_view key;
    od::value fv;
    if (auto err = field.unescaped_key().get(key)) return err;
    if (auto err = field.value().get(fv)) return err;
    if (auto err = f(key, fv)) return err;
  }
  return simdjson::SUCCESS;
}

template <typename F>
simdjson::error_code ForEachItem(od::value v, F f) {
  od::array arr;
  if (auto err = v.get_array().get(arr)) return err;
  for (auto item : arr) {
    od::value iv;
    if (auto err = item.get(iv)) return err;
    if (auto err = f(iv)) return err;
  }
  return simdjson::SUCCESS;
}

simdjson::error_code ReadString(od::value v, std::string* out) {
  std::string_view s;
  if (auto err = v.get_string().get(s)) return err;
  out->assign(s);
  return simdjson::SUCCESS;
}

simdjson::error_code ReadStrings(od::value v, std::vector<std::string>* out) {
  return ForEachItem(v, [&](od::value item) {
    std::string s;
    if (auto err = ReadString(item, &s)) return err;
    out->push_back(std::move(s));
    return simdjson::SUCCESS;
  });
}

// Parses `json` (padded copy) and calls f(document value).
template <typename F>
absl::Status WithDocument(absl::string_view json, absl::string_view what, F f) {
  simdjson::padded_string padded(json.data(), json.size());
  od::parser parser;
  od::document doc;
  od::value root;
  if (auto err = parser.iterate(padded).get(doc)) return Bad(what, err);
  if (auto err = doc.get_value().get(root)) return Bad(what, err);
  if (auto err = f(root)) return Bad(what, err);
  return absl::OkStatus();
}

}  // namespace

std::string ResourceInfo::BasePath() const {
  return gvr.group.empty() ? absl::StrCat("/api/", gvr.version)
                           : absl::StrCat("/apis/", gvr.group, "/", gvr.version);
}

absl::StatusOr<std::vector<ResourceInfo>> ParseAggregatedDiscovery(absl::string_view json) {
  std::vector<ResourceInfo> out;
  absl::Status s = WithDocument(json, "APIGroupDiscoveryList", [&](od::value root) {
    return ForEachField(root, [&](std::string_view key, od::value v) -> simdjson::error_code {
      if (key != "items") return simdjson::SUCCESS;
      return ForEachItem(v, [&](od::value group_item) {
        std::string group;
        // metadata.name is the group; it precedes versions in what the server writes, but do
        // not rely on it: collect versions first, then stamp the group.
        std::vector<ResourceInfo> group_resources;
        auto err = ForEachField(group_item, [&](std::string_view gk, od::value gv) {
          if (gk == "metadata") {
            return ForEachField(gv, [&](std::string_view mk, od::value mv) {
              return mk == "name" ? ReadString(mv, &group) : simdjson::SUCCESS;
            });
          }
          if (gk != "versions") return simdjson::SUCCESS;
          return ForEachItem(gv, [&](od::value version_item) {
            std::string version;
            std::vector<ResourceInfo> resources;
            auto verr = ForEachField(version_item, [&](std::string_view vk, od::value vv) {
              if (vk == "version") return ReadString(vv, &version);
              if (vk != "resources") return simdjson::SUCCESS;
              return ForEachItem(vv, [&](od::value r) {
                ResourceInfo info;
                auto rerr = ForEachField(r, [&](std::string_view rk, od::value rv) {
                  if (rk == "resource") return ReadString(rv, &info.gvr.resource);
                  if (rk == "singularResource") return ReadString(rv, &info.singular);
                  if (rk == "verbs") return ReadStrings(rv, &info.verbs);
                  if (rk == "shortNames") return ReadStrings(rv, &info.short_names);
                  if (rk == "scope") {
                    std::string scope;
                    auto e = ReadString(rv, &scope);
                    info.namespaced = scope == "Namespaced";
                    return e;
                  }
                  if (rk == "responseKind") {
                    return ForEachField(rv, [&](std::string_view kk, od::value kv) {
                      return kk == "kind" ? ReadString(kv, &info.kind) : simdjson::SUCCESS;
                    });
                  }
                  return simdjson::SUCCESS;
                });
                if (rerr) return rerr;
                resources.push_back(std::move(info));
                return simdjson::SUCCESS;
              });
            });
            if (verr) return verr;
            for (ResourceInfo& r : resources) {
              r.gvr.version = version;
              group_resources.push_back(std::move(r));
            }
            return simdjson::SUCCESS;
          });
        });
        if (err) return err;
        for (ResourceInfo& r : group_resources) {
          r.gvr.group = group;
          out.push_back(std::move(r));
        }
        return simdjson::SUCCESS;
      });
    });
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<ResourceInfo>> ParseResourceList(absl::string_view json) {
  std::vector<ResourceInfo> out;
  std::string group_version;
  absl::Status s = WithDocument(json, "APIResourceList", [&](od::value root) {
    return ForEachField(root, [&](std::string_view key, od::value v) -> simdjson::error_code {
      if (key == "groupVersion") return ReadString(v, &group_version);
      if (key != "resources") return simdjson::SUCCESS;
      return ForEachItem(v, [&](od::value r) {
        ResourceInfo info;
        auto err = ForEachField(r, [&](std::string_view rk, od::value rv) {
          if (rk == "name") return ReadString(rv, &info.gvr.resource);
          if (rk == "singularName") return ReadString(rv, &info.singular);
          if (rk == "kind") return ReadString(rv, &info.kind);
          if (rk == "verbs") return ReadStrings(rv, &info.verbs);
          if (rk == "shortNames") return ReadStrings(rv, &info.short_names);
          if (rk == "namespaced") return rv.get_bool().get(info.namespaced);
          return simdjson::SUCCESS;
        });
        if (err) return err;
        out.push_back(std::move(info));
        return simdjson::SUCCESS;
      });
    });
  });
  if (!s.ok()) return s;
  std::vector<std::string> gv = absl::StrSplit(group_version, '/');
  for (ResourceInfo& r : out) {
    if (gv.size() == 2) {
      r.gvr.group = gv[0];
      r.gvr.version = gv[1];
    } else {
      r.gvr.version = group_version;
    }
  }
  return out;
}

Discovery::Discovery(Options options)
    : options_(std::move(options)),
      miss_refreshes_(1.0 / std::max(absl::ToDoubleSeconds(options_.miss_refresh_interval), 1e-3),
                      std::max(options_.miss_refresh_burst, 1), absl::Now()) {}

absl::StatusOr<std::unique_ptr<Discovery>> Discovery::Create(Options options) {
  if (!options.fetch) return absl::InvalidArgumentError("Discovery: fetch is required");
  return std::unique_ptr<Discovery>(new Discovery(std::move(options)));
}

int Discovery::refreshes() const {
  MutexLock lock(&mu_);
  return refreshes_;
}

absl::Status Discovery::Refresh() {
  MutexLock lock(&mu_);
  return RefreshLocked();
}

absl::Status Discovery::RefreshLocked() {
  ++refreshes_;
  std::vector<ResourceInfo> all;
  auto add = [&](absl::StatusOr<std::vector<ResourceInfo>> parsed) -> absl::Status {
    if (!parsed.ok()) return parsed.status();
    for (ResourceInfo& r : *parsed) {
      if (r.gvr.resource.find('/') != std::string::npos) continue;  // a subresource
      all.push_back(std::move(r));
    }
    return absl::OkStatus();
  };
  bool aggregated = false;
  if (options_.aggregated) {
    absl::StatusOr<Response> core = options_.fetch("/api", kAggregatedAccept);
    if (!core.ok()) return core.status();
    if (absl::StrContains(core->content_type, "apidiscovery.k8s.io")) {
      absl::StatusOr<Response> groups = options_.fetch("/apis", kAggregatedAccept);
      if (!groups.ok()) return groups.status();
      if (absl::Status s = add(ParseAggregatedDiscovery(core->body)); !s.ok()) return s;
      if (absl::Status s = add(ParseAggregatedDiscovery(groups->body)); !s.ok()) return s;
      aggregated = true;
    }
  }
  if (!aggregated) {
    // Legacy: /api/v1 for the core group, then every version of every group in /apis.
    absl::StatusOr<Response> core = options_.fetch("/api/v1", "application/json");
    if (!core.ok()) return core.status();
    if (absl::Status s = add(ParseResourceList(core->body)); !s.ok()) return s;
    absl::StatusOr<Response> groups = options_.fetch("/apis", "application/json");
    if (!groups.ok()) return groups.status();
    std::vector<std::string> group_versions;
    absl::Status s = WithDocument(groups->body, "APIGroupList", [&](od::value root) {
      return ForEachField(root, [&](std::string_view key, od::value v) -> simdjson::error_code {
        if (key != "groups") return simdjson::SUCCESS;
        return ForEachItem(v, [&](od::value g) {
          return ForEachField(g, [&](std::string_view gk, od::value gv) -> simdjson::error_code {
            if (gk != "versions") return simdjson::SUCCESS;
            return ForEachItem(gv, [&](od::value ver) {
              return ForEachField(ver, [&](std::string_view vk, od::value vv) {
                if (vk != "groupVersion") return simdjson::SUCCESS;
                std::string value;
                auto err = ReadString(vv, &value);
                group_versions.push_back(std::move(value));
                return err;
              });
            });
          });
        });
      });
    });
    if (!s.ok()) return s;
    for (const std::string& gv : group_versions) {
      absl::StatusOr<Response> list = options_.fetch("/apis/" + gv, "application/json");
      if (!list.ok()) return list.status();
      if (absl::Status ls = add(ParseResourceList(list->body)); !ls.ok()) return ls;
    }
  }
  by_resource_.clear();
  by_kind_.clear();
  for (ResourceInfo& r : all) {
    by_kind_.try_emplace(GroupVersionKind{r.gvr.group, r.gvr.version, r.kind}, r.gvr);
    GroupVersionResource key = r.gvr;
    by_resource_.try_emplace(std::move(key), std::move(r));
  }
  loaded_ = true;
  return absl::OkStatus();
}

template <typename T, typename Find>
absl::StatusOr<std::optional<T>> Discovery::LookupLocked(Find find) {
  if (loaded_) {
    if (std::optional<T> found = find(); found.has_value()) return found;
    if (!miss_refreshes_.TryTake(absl::Now())) return std::optional<T>();
  }
  if (absl::Status s = RefreshLocked(); !s.ok()) return s;
  return find();
}

absl::StatusOr<ResourceInfo> Discovery::Resource(const GroupVersionResource& gvr) {
  MutexLock lock(&mu_);
  absl::StatusOr<std::optional<ResourceInfo>> found =
      LookupLocked<ResourceInfo>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<ResourceInfo> {
        auto it = by_resource_.find(gvr);
        if (it == by_resource_.end()) return std::nullopt;
        return it->second;
      });
  if (!found.ok()) return found.status();
  if (found->has_value()) return **std::move(found);
  return absl::NotFoundError(absl::StrCat("the server does not serve resource \"", gvr.resource,
                                          "\" in \"", gvr.GroupVersion(), "\""));
}

absl::StatusOr<ResourceInfo> Discovery::ResourceForKind(const GroupVersionKind& gvk) {
  MutexLock lock(&mu_);
  absl::StatusOr<std::optional<ResourceInfo>> found =
      LookupLocked<ResourceInfo>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<ResourceInfo> {
        auto it = by_kind_.find(gvk);
        if (it == by_kind_.end()) return std::nullopt;
        return by_resource_.at(it->second);
      });
  if (!found.ok()) return found.status();
  if (found->has_value()) return **std::move(found);
  return absl::NotFoundError(absl::StrCat(
      "the server does not serve kind \"", gvk.kind, "\" in \"",
      gvk.group.empty() ? gvk.version : gvk.group + "/" + gvk.version, "\""));
}

absl::StatusOr<std::vector<ResourceInfo>> Discovery::ResourcesForGroupKind(
    const std::optional<std::string>& group, absl::string_view kind) {
  MutexLock lock(&mu_);
  absl::StatusOr<std::optional<std::vector<ResourceInfo>>> found =
      LookupLocked<std::vector<ResourceInfo>>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<std::vector<ResourceInfo>> {
        std::vector<ResourceInfo> all;
        for (const auto& [gvk, gvr] : by_kind_) {
          if (gvk.kind == kind && (!group.has_value() || gvk.group == *group)) {
            all.push_back(by_resource_.at(gvr));
          }
        }
        if (all.empty()) return std::nullopt;
        return all;
      });
  if (!found.ok()) return found.status();
  if (found->has_value()) return **std::move(found);
  return absl::NotFoundError(absl::StrCat("the server does not serve kind \"", kind, "\"",
                                          group.has_value() ? absl::StrCat(" in group \"", *group, "\"")
                                                            : std::string(" in any group")));
}

}  // namespace informerd::client
