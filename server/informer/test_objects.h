// Test helpers: Kubernetes objects built from a few fields, parsed into client::Objects.
//
//   ObjectPtr cm = MakeObject({.ns = "default", .name = "a", .rv = "7"});
//   ObjectPtr pod = MakeObject({.name = "p", .extra = R"("spec":{"nodeName":"n1"})"});
//
// Thread safety: reentrant.
#ifndef INFORMERD_SERVER_INFORMER_TEST_OBJECTS_H_
#define INFORMERD_SERVER_INFORMER_TEST_OBJECTS_H_

#include <string>
#include <utility>
#include <vector>

#include "server/informer/index.h"

namespace informerd::informer::testing {

struct TestObject {
  std::string ns = "default";  // "" for a cluster-scoped object
  std::string name = "a";
  std::string rv = "1";
  std::string uid;  // "" -> "uid-<ns>-<name>"
  std::vector<std::pair<std::string, std::string>> labels;
  std::string kind = "ConfigMap";
  std::string api_version = "v1";
  // Raw JSON for metadata.ownerReferences (an array), if any.
  std::string owner_references;
  // Raw JSON members appended to metadata, e.g. R"("managedFields":[{"manager":"x"}])".
  std::string extra_metadata;
  // Raw JSON members appended to the object, e.g. R"("spec":{"nodeName":"n1"})".
  std::string extra;
};

// The object's JSON (compact).
std::string ObjectJson(const TestObject& object);
// Parses ObjectJson(object); aborts the test binary when it does not parse.
ObjectPtr MakeObject(const TestObject& object);
// Shorthand for a ConfigMap.
ObjectPtr Obj(std::string ns, std::string name, std::string rv = "1");

}  // namespace informerd::informer::testing

#endif  // INFORMERD_SERVER_INFORMER_TEST_OBJECTS_H_
