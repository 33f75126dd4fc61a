#include "server/informer/test_objects.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace informerd::informer::testing {

std::string ObjectJson(const TestObject& o) {
  std::string json = absl::StrCat(R"({"kind":")", o.kind, R"(","apiVersion":")", o.api_version,
                                   R"(","metadata":{"name":")", o.name, "\"");
  if (!o.ns.empty()) absl::StrAppend(&json, R"(,"namespace":")", o.ns, "\"");
  absl::StrAppend(&json, R"(,"uid":")",
                  o.uid.empty() ? absl::StrCat("uid-", o.ns, "-", o.name) : o.uid, "\"");
  absl::StrAppend(&json, R"(,"resourceVersion":")", o.rv, "\"");
  if (!o.labels.empty()) {
    absl::StrAppend(&json, R"(,"labels":{)");
    for (size_t i = 0; i < o.labels.size(); ++i) {
      absl::StrAppend(&json, i ? "," : "", "\"", o.labels[i].first, "\":\"", o.labels[i].second,
                      "\"");
    }
    absl::StrAppend(&json, "}");
  }
  if (!o.owner_references.empty()) {
    absl::StrAppend(&json, R"(,"ownerReferences":)", o.owner_references);
  }
  if (!o.extra_metadata.empty()) absl::StrAppend(&json, ",", o.extra_metadata);
  absl::StrAppend(&json, "}");
  if (!o.extra.empty()) absl::StrAppend(&json, ",", o.extra);
  absl::StrAppend(&json, "}");
  return json;
}

ObjectPtr MakeObject(const TestObject& object) {
  const std::string json = ObjectJson(object);
  auto parsed = client::Object::Parse(json);
  if (!parsed.ok()) {
    std::fprintf(stderr, "MakeObject: %s: %s\n", json.c_str(),
                 std::string(parsed.status().message()).c_str());
    std::abort();
  }
  return *std::move(parsed);
}

ObjectPtr Obj(std::string ns, std::string name, std::string rv) {
  TestObject o;
  o.ns = std::move(ns);
  o.name = std::move(name);
  o.rv = std::move(rv);
  return MakeObject(o);
}

}  // namespace informerd::informer::testing
