#include "client/object.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "client/object_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

constexpr char kPod[] = R"json({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0",)json"
    R"json("namespace":"prod","uid":"0a1b-2c3d","resourceVersion":"12345","generation":3,)json"
    R"json("deletionTimestamp":"2026-01-02T03:04:05Z","labels":{"tier":"frontend","app":"web"},)json"
    R"json("creationTimestamp":"2026-01-01T00:00:00Z","finalizers":["example.com/guard","kubernetes"],)json"
    R"json("annotations":{"note":"x","deploy/rev":"7"},)json"
    R"json("ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",)json"
    R"json("name":"web-7d9","uid":"rs-uid","controller":true,"blockOwnerDeletion":true},)json"
    R"json({"apiVersion":"v1","kind":"Node","name":"n1","uid":"node-uid"}]},)json"
    R"json("spec":{"nodeName":"n1","containers":[{"name":"c","image":"nginx"}]},"status":{}})json";

TEST(ObjectTest, ParsesEveryMetadataField) {
  absl::StatusOr<std::shared_ptr<const Object>> parsed = Object::Parse(kPod);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Object& pod = **parsed;
  EXPECT_EQ(pod.json(), kPod);
  EXPECT_EQ(pod.kind(), "Pod");
  EXPECT_EQ(pod.api_version(), "v1");
  EXPECT_EQ(pod.name(), "web-0");
  EXPECT_EQ(pod.namespace_name(), "prod");
  EXPECT_EQ(pod.key(), "prod/web-0");
  EXPECT_EQ(pod.uid(), "0a1b-2c3d");
  EXPECT_EQ(pod.resource_version(), "12345");
  EXPECT_EQ(pod.generation(), 3);
  EXPECT_EQ(pod.deletion_timestamp(), "2026-01-02T03:04:05Z");
  ASSERT_EQ(pod.labels().size(), 2u);
  EXPECT_EQ(pod.labels()[0].key, "app");  // sorted, though the JSON had them the other way round
  EXPECT_EQ(pod.labels()[1].key, "tier");
  EXPECT_THAT(pod.label("app"), Optional(absl::string_view("web")));
  EXPECT_EQ(pod.label("missing"), std::nullopt);
  EXPECT_EQ(pod.creation_timestamp(), "2026-01-01T00:00:00Z");
  ASSERT_EQ(pod.annotations().size(), 2u);
  EXPECT_EQ(pod.annotations()[0].key, "deploy/rev");  // sorted
  EXPECT_EQ(pod.annotations()[1].key, "note");
  EXPECT_THAT(pod.annotation("note"), Optional(absl::string_view("x")));
  EXPECT_THAT(pod.annotation("deploy/rev"), Optional(absl::string_view("7")));
  EXPECT_EQ(pod.annotation("app"), std::nullopt);  // a label, not an annotation
  EXPECT_THAT(pod.finalizers(), ElementsAre("example.com/guard", "kubernetes"));
  ASSERT_EQ(pod.owner_references().size(), 2u);
  const OwnerReference* controller = pod.controller_ref();
  ASSERT_NE(controller, nullptr);
  EXPECT_EQ(controller->kind, "ReplicaSet");
  EXPECT_EQ(controller->name, "web-7d9");
  EXPECT_EQ(controller->uid, "rs-uid");
  EXPECT_EQ(controller->api_version, "apps/v1");
  EXPECT_TRUE(controller->block_owner_deletion);
  EXPECT_FALSE(pod.owner_references()[1].controller);
}

TEST(ObjectTest, ClusterScopedObjectsAreKeyedByName) {
  auto ns = Object::Parse(R"({"kind":"Namespace","metadata":{"name":"kube-system"}})");
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ((*ns)->key(), "kube-system");
  EXPECT_EQ((*ns)->namespace_name(), "");
  EXPECT_EQ((*ns)->generation(), 0);
  EXPECT_TRUE((*ns)->labels().empty());
  EXPECT_TRUE((*ns)->annotations().empty());
  EXPECT_TRUE((*ns)->finalizers().empty());
  EXPECT_EQ((*ns)->creation_timestamp(), "");
  EXPECT_EQ((*ns)->controller_ref(), nullptr);
}

TEST(ObjectTest, StoresCompactBytes) {
  auto cm = Object::Parse("{\n  \"kind\": \"ConfigMap\",\n  \"metadata\": {\"name\": \"a b\"},\n"
                          "  \"data\": {\"k\": \"v with  spaces\"}\n}\n");
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ((*cm)->json(),
            R"({"kind":"ConfigMap","metadata":{"name":"a b"},"data":{"k":"v with  spaces"}})");
  EXPECT_EQ((*cm)->name(), "a b");
}

TEST(ObjectTest, UnescapesMetadataStrings) {
  auto cm = Object::Parse(
      R"({"metadata":{"name":"n\u0041","labels":{"q\"k":"line\nnext"}}})");
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ((*cm)->name(), "nA");
  EXPECT_THAT((*cm)->label("q\"k"), Optional(absl::string_view("line\nnext")));
}

TEST(ObjectTest, AnnotationsAndFinalizersPointIntoTheJsonOrGetDecodedCopies) {
  // kubectl's last-applied-configuration is JSON inside a string: escaped, so decoded.
  auto cm = Object::Parse(
      R"({"metadata":{"name":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":)"
      R"("{\"kind\":\"ConfigMap\"}\n","plain":"v"},"finalizers":["f\u0031","f2"]}})");
  ASSERT_TRUE(cm.ok()) << cm.status();
  const Object& o = **cm;
  auto in_json = [&](absl::string_view s) {
    return s.data() >= o.json().data() && s.data() + s.size() <= o.json().data() + o.json().size();
  };
  EXPECT_THAT(o.annotation("kubectl.kubernetes.io/last-applied-configuration"),
              Optional(absl::string_view("{\"kind\":\"ConfigMap\"}\n")));
  EXPECT_FALSE(in_json(*o.annotation("kubectl.kubernetes.io/last-applied-configuration")));
  EXPECT_THAT(o.annotation("plain"), Optional(absl::string_view("v")));
  EXPECT_TRUE(in_json(*o.annotation("plain")));
  EXPECT_THAT(o.finalizers(), ElementsAre("f1", "f2"));
  EXPECT_FALSE(in_json(o.finalizers()[0]));
  EXPECT_TRUE(in_json(o.finalizers()[1]));
}

TEST(ObjectTest, AnObjectWithoutAnnotationsOrFinalizersStaysSmall) {
  // The fixed part of every Object: 72 bytes (56 before annotations, finalizers and
  // creationTimestamp, which took the padding and 8 more; 8 more for the pointer to the derived
  // form, the service's wire encoding shared by every Watch stream).
  EXPECT_LE(sizeof(Object), 72u);
  auto small = Object::Parse(R"({"metadata":{"name":"a","namespace":"b"}})");
  ASSERT_TRUE(small.ok());
  auto labelled = Object::Parse(R"({"metadata":{"name":"a","namespace":"b","labels":{"k":"v"}}})");
  ASSERT_TRUE(labelled.ok());
  // No arrays at all: the key follows the json's padding.
  EXPECT_LE((*small)->allocated_bytes(), (*labelled)->allocated_bytes());
}

TEST(ObjectTest, TheDerivedFormIsMadeOnceAndGoesWithTheObject) {
  static int alive = 0;
  struct Counted : Object::Derived {
    Counted() { ++alive; }
    ~Counted() override { --alive; }
  };
  {
    auto o = Object::Parse(R"({"metadata":{"name":"a"}})");
    ASSERT_TRUE(o.ok());
    int made = 0;
    auto make = [&]() -> std::unique_ptr<Object::Derived> {
      ++made;
      return std::make_unique<Counted>();
    };
    const Object::Derived* first = &(*o)->derived(make);
    EXPECT_EQ(&(*o)->derived(make), first);
    EXPECT_EQ(made, 1);
    EXPECT_EQ(alive, 1);
  }
  EXPECT_EQ(alive, 0);
}

TEST(ObjectTest, ConcurrentFirstCallsMakeTheDerivedFormOnce) {
  auto o = Object::Parse(R"({"metadata":{"name":"a"}})");
  ASSERT_TRUE(o.ok());
  std::atomic<int> made{0};
  std::atomic<bool> go{false};
  auto make = [&]() -> std::unique_ptr<Object::Derived> {
    made.fetch_add(1);
    // Long enough that the other threads arrive while this one makes it.
    absl::SleepFor(absl::Milliseconds(20));
    return std::make_unique<Object::Derived>();
  };
  std::vector<const Object::Derived*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      seen[i] = &(*o)->derived(make);
    });
  }
  go.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(made.load(), 1);
  for (const Object::Derived* d : seen) EXPECT_EQ(d, seen[0]);
}

TEST(ObjectTest, TooManyAnnotationsOrFinalizersAreRefused) {
  std::string annotations = R"({"metadata":{"name":"a","annotations":{)";
  std::string finalizers = R"({"metadata":{"name":"a","finalizers":[)";
  for (int i = 0; i < 65536; ++i) {
    absl::StrAppend(&annotations, i == 0 ? "" : ",", "\"k", i, "\":\"v\"");
    absl::StrAppend(&finalizers, i == 0 ? "" : ",", "\"f", i, "\"");
  }
  absl::StrAppend(&annotations, "}}}");
  absl::StrAppend(&finalizers, "]}}");
  auto a = Object::Parse(annotations);
  EXPECT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("more than 65535 annotations"));
  auto f = Object::Parse(finalizers);
  EXPECT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("more than 65535 finalizers"));
}

TEST(ObjectTest, UnescapedMetadataStringsPointIntoTheJsonBytes) {
  auto pod = Object::Parse(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"ns","uid":"u1",)"
      R"("resourceVersion":"7","deletionTimestamp":"2024-01-01T00:00:00Z","labels":{"app":"w",)"
      R"("t\u0041":"x"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",)"
      R"("name":"web-1","uid":"u0","controller":true}]}})");
  ASSERT_TRUE(pod.ok()) << pod.status();
  const Object& o = **pod;
  auto in_json = [&](absl::string_view s) {
    return s.data() >= o.json().data() && s.data() + s.size() <= o.json().data() + o.json().size();
  };
  for (absl::string_view s : {o.kind(), o.api_version(), o.uid(), o.resource_version(),
                              o.deletion_timestamp(), o.controller_ref()->name}) {
    EXPECT_TRUE(in_json(s)) << s;
  }
  EXPECT_EQ(o.key(), "ns/web");
  EXPECT_EQ(o.namespace_name(), "ns");
  EXPECT_EQ(o.name(), "web");
  EXPECT_THAT(o.label("app"), Optional(absl::string_view("w")));
  EXPECT_TRUE(in_json(*o.label("app")));
  // An escaped key gets a decoded copy, outside the json.
  ASSERT_EQ(o.labels().size(), 2u);
  EXPECT_EQ(o.labels()[1].key, "tA");
  EXPECT_FALSE(in_json(o.labels()[1].key));
  EXPECT_GE(o.allocated_bytes(), o.json().size() + Object::kPadding + sizeof(Object));
}

TEST(ObjectTest, NullMetadataFieldsAreAbsent) {
  auto cm = Object::Parse(
      R"({"metadata":{"name":"a","labels":null,"ownerReferences":null,"deletionTimestamp":null,"generation":null,)"
      R"("annotations":null,"finalizers":null,"creationTimestamp":null}})");
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_TRUE((*cm)->labels().empty());
  EXPECT_TRUE((*cm)->annotations().empty());
  EXPECT_TRUE((*cm)->finalizers().empty());
  EXPECT_EQ((*cm)->creation_timestamp(), "");
  EXPECT_EQ((*cm)->deletion_timestamp(), "");
}

TEST(ObjectTest, WrongTypesAreErrorsNamingTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"metadata":[]})", "metadata: not an object"},
      {R"({"metadata":{"name":7}})", "metadata.name: not a string"},
      {R"({"metadata":{"labels":{"app":1}}})", "metadata.labels[\"app\"]: not a string"},
      {R"({"metadata":{"labels":[]}})", "metadata.labels: not an object"},
      {R"({"metadata":{"annotations":{"a":true}}})", "metadata.annotations[\"a\"]: not a string"},
      {R"({"metadata":{"annotations":"x"}})", "metadata.annotations: not an object"},
      {R"({"metadata":{"finalizers":{}}})", "metadata.finalizers: not an array"},
      {R"({"metadata":{"finalizers":[1]}})", "metadata.finalizers[]: not a string"},
      {R"({"metadata":{"creationTimestamp":5}})", "metadata.creationTimestamp: not a string"},
      {R"({"metadata":{"generation":"2"}})", "metadata.generation: not an integer"},
      {R"({"metadata":{"ownerReferences":{}}})", "metadata.ownerReferences: not an array"},
      {R"({"metadata":{"ownerReferences":[{"controller":"yes"}]}})",
       "metadata.ownerReferences[].controller: not a boolean"},
      {R"({"kind":{}})", "kind: not a string"},
  };
  for (const Case& c : cases) {
    auto parsed = Object::Parse(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.field)) << c.json;
  }
}

TEST(ObjectTest, RejectsWhatIsNotOneJsonObject) {
  for (const char* json : {"", "[]", "\"s\"", "{", R"({"metadata":{"name":"a"})",
                           R"({"a":1} {"b":2})", "{\"a\":\xff}", "nul"}) {
    EXPECT_FALSE(Object::Parse(json).ok()) << json;
  }
}

TEST(ObjectTest, JsonCanBeReadInPlaceWithItsPadding) {
  auto pod = Object::Parse(kPod);
  ASSERT_TRUE(pod.ok());
  absl::string_view json = (*pod)->json();
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  ASSERT_EQ(parser.iterate(json.data(), json.size(), json.size() + Object::kPadding).get(doc),
            simdjson::SUCCESS);
  std::string_view node;
  ASSERT_EQ(doc["spec"]["nodeName"].get_string().get(node), simdjson::SUCCESS);
  EXPECT_EQ(node, "n1");
}

TEST(ObjectParserTest, ListItemsGetKindAndApiVersionPrepended) {
  simdjson::padded_string list(std::string_view(
      R"({"kind":"ConfigMapList","items":[{"metadata":{"name":"a"},"data":{}}, { } ,)"
      R"({"kind":"Other","apiVersion":"x/v1","metadata":{"name":"b"}}]})"));
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  ASSERT_EQ(parser.iterate(list).get(doc), simdjson::SUCCESS);
  simdjson::ondemand::array items;
  ASSERT_EQ(doc["items"].get_array().get(items), simdjson::SUCCESS);
  ObjectParser object_parser;
  ObjectParseOptions options{.default_kind = "ConfigMap", .default_api_version = "v1"};
  std::vector<std::string> jsons;
  for (auto item : items) {
    simdjson::ondemand::value v;
    ASSERT_EQ(item.get(v), simdjson::SUCCESS);
    auto object = object_parser.Parse(v, list.data() + list.size(), options);
    ASSERT_TRUE(object.ok()) << object.status();
    jsons.emplace_back((*object)->json());
    if (jsons.size() == 1) {
      EXPECT_EQ((*object)->kind(), "ConfigMap");
      EXPECT_EQ((*object)->api_version(), "v1");
    }
  }
  EXPECT_THAT(jsons, ElementsAre(
      R"({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{}})",
      R"({"kind":"ConfigMap","apiVersion":"v1"})",
      R"({"kind":"Other","apiVersion":"x/v1","metadata":{"name":"b"}})"));
}


// Parses `json` (one object) with ObjectParser and `options`.
absl::StatusOr<std::shared_ptr<const Object>> ParseWith(const std::string& json,
                                                        ObjectParseOptions options) {
  simdjson::padded_string padded(json);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::value v;
  if (parser.iterate(padded).get(doc) || doc.get_value().get(v)) {
    return absl::InvalidArgumentError("not JSON");
  }
  ObjectParser object_parser;
  auto object = object_parser.Parse(v, padded.data() + padded.size(), options);
  if (!object.ok()) return object.status();
  // The Object owns its bytes: it must stay right after the input is gone.
  return object;
}

TEST(ObjectParserTest, DropsManagedFieldsWhereverTheMemberIs) {
  const std::string mf = R"([{"manager":"kubectl","operation":"Update","fieldsV1":{"f:data":{}}}])";
  struct Case {
    std::string json;
    std::string want;
  };
  const std::vector<Case> cases = {
      {absl::StrCat(R"({"metadata":{"name":"a","managedFields":)", mf, R"(,"uid":"u1","labels":{"x":"1"}},"data":{}})"),
       R"({"metadata":{"name":"a","uid":"u1","labels":{"x":"1"}},"data":{}})"},
      {absl::StrCat(R"({"metadata":{"managedFields":)", mf, R"(,"name":"a","resourceVersion":"7"}})"),
       R"({"metadata":{"name":"a","resourceVersion":"7"}})"},
      {absl::StrCat(R"({"metadata":{"name":"a","namespace":"n","managedFields":)", mf, R"(}})"),
       R"({"metadata":{"name":"a","namespace":"n"}})"},
      {absl::StrCat(R"({"metadata":{"managedFields":)", mf, R"(}})"), R"({"metadata":{}})"},
      {R"({"metadata":{"name":"a","managedFields":null}})", R"({"metadata":{"name":"a"}})"},
      {absl::StrCat("{ \"metadata\" : {\n  \"name\" : \"a\" ,\n  \"managedFields\" : ", mf,
                    " ,\n  \"uid\": \"u1\"\n} }"),
       R"({"metadata":{"name":"a","uid":"u1"}})"},
      // Only metadata's own member: a data key spelled the same stays.
      {absl::StrCat(R"({"metadata":{"name":"a","managedFields":)", mf, R"(},"data":{"managedFields":"kept"}})"),
       R"({"metadata":{"name":"a"},"data":{"managedFields":"kept"}})"},
  };
  for (const Case& c : cases) {
    for (bool compact : {false, true}) {
      auto object = ParseWith(c.json, {.compact = compact, .drop_managed_fields = true});
      ASSERT_TRUE(object.ok()) << object.status() << " " << c.json;
      const std::string stored((*object)->json());
      if (compact) {
        EXPECT_EQ(stored, c.want) << c.json;
      } else {
        // Without compaction the remaining bytes keep their spacing: compare compacted.
        auto again = Object::Parse(stored);
        ASSERT_TRUE(again.ok()) << again.status() << " " << stored;
        EXPECT_EQ((*again)->json(), c.want) << c.json;
        EXPECT_EQ(stored.find("managedFields\":["), std::string::npos) << stored;
      }
      // The metadata still reads right from the stored copy (the fields after the cut moved).
      auto reparsed = Object::Parse(c.want).value();
      EXPECT_EQ((*object)->name(), reparsed->name()) << c.json;
      EXPECT_EQ((*object)->uid(), reparsed->uid());
      EXPECT_EQ((*object)->resource_version(), reparsed->resource_version());
      EXPECT_EQ((*object)->namespace_name(), reparsed->namespace_name());
      EXPECT_EQ((*object)->key(), reparsed->key());
      ASSERT_EQ((*object)->labels().size(), reparsed->labels().size());
    }
  }
  // Off, the member stays.
  auto kept = ParseWith(cases[0].json, {.compact = true});
  ASSERT_TRUE(kept.ok());
  EXPECT_NE((*kept)->json().find("managedFields"), absl::string_view::npos);
}

TEST(ObjectParserTest, DroppingManagedFieldsKeepsListItemsPrefix) {
  auto object = ParseWith(R"({"metadata":{"managedFields":[{"manager":"m"}],"name":"a"}})",
                          {.default_kind = "ConfigMap",
                           .default_api_version = "v1",
                           .compact = false,
                           .drop_managed_fields = true});
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ((*object)->json(), R"({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}})");
  EXPECT_EQ((*object)->name(), "a");
}

}  // namespace
}  // namespace informerd::client
