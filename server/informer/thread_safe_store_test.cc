#include "server/informer/thread_safe_store.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;
using testing::MakeObject;
using testing::Obj;

std::unique_ptr<ThreadSafeStore> NewStore(std::vector<IndexSpec> indexers = {}) {
  return ThreadSafeStore::Create({.indexers = std::move(indexers)}).value();
}

std::vector<std::string> Keys(const std::vector<ObjectPtr>& objects) {
  std::vector<std::string> keys;
  for (const ObjectPtr& o : objects) keys.emplace_back(o->key());
  return keys;
}

ObjectPtr Labelled(std::string name, std::string app, std::string rv = "1") {
  return MakeObject({.name = std::move(name), .rv = std::move(rv), .labels = {{"app", app}}});
}

TEST(ThreadSafeStoreTest, GetReturnsTheStoredObjectAndTheResourceVersion) {
  auto store = NewStore();
  ObjectPtr a = Obj("default", "a", "5");
  EXPECT_EQ(store->Update(a), nullptr);
  store->SetResourceVersion("5");
  GetResult got = store->Get("default/a");
  EXPECT_EQ(got.object, a) << "the same shared object, not a copy";
  EXPECT_EQ(got.resource_version, "5");
  GetResult missing = store->Get("default/b");
  EXPECT_EQ(missing.object, nullptr);
  EXPECT_EQ(missing.resource_version, "5") << "a miss also says what state it saw";
}

TEST(ThreadSafeStoreTest, UpdateReplacesAndReturnsThePreviousObject) {
  auto store = NewStore();
  ObjectPtr v1 = Obj("default", "a", "1");
  ObjectPtr v2 = Obj("default", "a", "2");
  store->Update(v1);
  EXPECT_EQ(store->Update(v2), v1);
  EXPECT_EQ(store->Get("default/a").object, v2);
  EXPECT_EQ(store->Size(), 1u);
}

TEST(ThreadSafeStoreTest, DeleteRemovesTheKeyAndUnknownKeysAreIgnored) {
  auto store = NewStore();
  ObjectPtr a = Obj("default", "a");
  store->Update(a);
  EXPECT_EQ(store->Delete("default/a"), a);
  EXPECT_EQ(store->Delete("default/a"), nullptr);
  EXPECT_EQ(store->Get("default/a").object, nullptr);
  EXPECT_EQ(store->Size(), 0u);
}

TEST(ThreadSafeStoreTest, ClusterScopedObjectsAreKeyedByName) {
  auto store = NewStore();
  store->Update(MakeObject({.ns = "", .name = "node-1", .kind = "Node"}));
  EXPECT_NE(store->Get("node-1").object, nullptr);
  EXPECT_THAT(store->ListKeys().keys, ElementsAre("node-1"));
}

TEST(ThreadSafeStoreTest, ListAndListKeysReturnEverything) {
  auto store = NewStore();
  store->Update(Obj("a", "x"));
  store->Update(Obj("b", "y"));
  store->SetResourceVersion("9");
  ListResult list = store->List();
  EXPECT_THAT(Keys(list.objects), UnorderedElementsAre("a/x", "b/y"));
  EXPECT_EQ(list.resource_version, "9");
  EXPECT_THAT(store->ListKeys().keys, UnorderedElementsAre("a/x", "b/y"));
}

TEST(ThreadSafeStoreTest, NamespaceIndexIsBuiltIn) {
  auto store = NewStore();
  store->Update(Obj("a", "x"));
  store->Update(Obj("a", "y"));
  store->Update(Obj("b", "z"));
  EXPECT_THAT(Keys(store->ListNamespace("a").objects), UnorderedElementsAre("a/x", "a/y"));
  EXPECT_THAT(store->IndexKeys(kNamespaceIndex, "b").value().keys, ElementsAre("b/z"));
  EXPECT_THAT(store->ListIndexFuncValues(kNamespaceIndex).value().values,
              UnorderedElementsAre("a", "b"));
  EXPECT_THAT(store->ListNamespace("c").objects, IsEmpty());
  EXPECT_THAT(store->IndexNames(), ElementsAre("namespace"));
}

TEST(ThreadSafeStoreTest, IndexesFollowUpdatesAndDeletes) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  store->Update(Labelled("a", "web"));
  store->Update(Labelled("b", "web"));
  store->Update(Labelled("c", "db"));
  EXPECT_THAT(store->IndexKeys("by-app", "web").value().keys,
              UnorderedElementsAre("default/a", "default/b"));
  store->Update(Labelled("b", "db", "2"));  // moves from web to db
  EXPECT_THAT(store->IndexKeys("by-app", "web").value().keys, ElementsAre("default/a"));
  EXPECT_THAT(store->IndexKeys("by-app", "db").value().keys,
              UnorderedElementsAre("default/b", "default/c"));
  store->Delete("default/a");
  EXPECT_THAT(store->ByIndex("by-app", "web").value().objects, IsEmpty());
  EXPECT_THAT(store->ListIndexFuncValues("by-app").value().values, ElementsAre("db"))
      << "a value with no objects left is forgotten";
  store->Update(MakeObject({.name = "c", .rv = "3"}));  // label removed
  EXPECT_THAT(store->IndexKeys("by-app", "db").value().keys, ElementsAre("default/b"));
}

TEST(ThreadSafeStoreTest, FieldAndOwnerIndexesAreSupported) {
  auto store = NewStore({IndexSpec::Field("by-node", "spec.nodeName"), IndexSpec::Owner("by-owner")});
  store->Update(MakeObject({.name = "p1",
                            .kind = "Pod",
                            .owner_references =
                                R"([{"kind":"ReplicaSet","name":"rs","uid":"u","controller":true}])",
                            .extra = R"("spec":{"nodeName":"n1"})"}));
  store->Update(MakeObject({.name = "p2", .kind = "Pod", .extra = R"("spec":{"nodeName":"n2"})"}));
  EXPECT_THAT(store->IndexKeys("by-node", "n1").value().keys, ElementsAre("default/p1"));
  EXPECT_THAT(store->IndexKeys("by-owner", "ReplicaSet/rs").value().keys,
              ElementsAre("default/p1"));
}

TEST(ThreadSafeStoreTest, IndexReturnsObjectsSharingAValueWithTheGivenObject) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  store->Update(Labelled("a", "web"));
  store->Update(Labelled("b", "web"));
  store->Update(Labelled("c", "db"));
  ObjectPtr probe = Labelled("zzz", "web");
  EXPECT_THAT(Keys(store->Index("by-app", *probe).value().objects),
              UnorderedElementsAre("default/a", "default/b"));
}

TEST(ThreadSafeStoreTest, UnknownIndexIsNotFound) {
  auto store = NewStore();
  EXPECT_EQ(store->ByIndex("nope", "x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->IndexKeys("nope", "x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ListIndexFuncValues("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Index("nope", *Obj("a", "b")).status().code(), absl::StatusCode::kNotFound);
}

TEST(ThreadSafeStoreTest, AddIndexersIndexesWhatIsAlreadyStored) {
  auto store = NewStore();
  store->Update(Labelled("a", "web"));
  ASSERT_TRUE(store->AddIndexers({IndexSpec::Label("by-app", "app")}).ok());
  EXPECT_THAT(store->IndexKeys("by-app", "web").value().keys, ElementsAre("default/a"));
}

TEST(ThreadSafeStoreTest, AddIndexersWithATakenNameAddsNothing) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  absl::Status s = store->AddIndexers(
      {IndexSpec::Label("by-tier", "tier"), IndexSpec::Label("by-app", "app2")});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(store->IndexNames(), ElementsAre("namespace", "by-app"));
  EXPECT_EQ(store->AddIndexers({IndexSpec::Label("namespace", "x")}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ThreadSafeStore::Create({.indexers = {IndexSpec::Field("f", "")}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ThreadSafeStoreTest, ReplaceKeepsUnchangedObjectsAndRemovesMissingOnes) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  ObjectPtr a = Labelled("a", "web");
  ObjectPtr b = Labelled("b", "web");
  store->Update(a);
  store->Update(b);
  ObjectPtr c = Labelled("c", "db");
  ObjectPtr b2 = Labelled("b", "db", "2");
  store->Replace({a, b2, c}, "10");
  EXPECT_EQ(store->Get("default/a").object, a);
  EXPECT_EQ(store->Get("default/b").object, b2);
  EXPECT_EQ(store->Get("default/c").object, c);
  EXPECT_EQ(store->Size(), 3u);
  EXPECT_EQ(store->ResourceVersion(), "10");
  EXPECT_THAT(store->IndexKeys("by-app", "db").value().keys,
              UnorderedElementsAre("default/b", "default/c"));
  store->Replace({c}, "11");
  EXPECT_THAT(store->ListKeys().keys, ElementsAre("default/c"));
  EXPECT_THAT(store->IndexKeys("by-app", "web").value().keys, IsEmpty());
  store->Replace({}, "12");
  EXPECT_EQ(store->Size(), 0u);
}

TEST(ThreadSafeStoreTest, ReplaceWithDuplicateKeysKeepsTheLast) {
  auto store = NewStore();
  ObjectPtr v1 = Obj("d", "a", "1");
  ObjectPtr v2 = Obj("d", "a", "2");
  store->Replace({v1, v2}, "2");
  EXPECT_EQ(store->Get("d/a").object, v2);
  EXPECT_EQ(store->Size(), 1u);
}

TEST(ThreadSafeStoreTest, StoringTheSameObjectAgainChangesNothing) {
  auto store = NewStore();
  ObjectPtr a = Obj("d", "a");
  store->Update(a);
  MemoryUsage before = store->memory();
  EXPECT_EQ(store->Update(a), a);
  EXPECT_EQ(store->memory().bytes, before.bytes);
  EXPECT_EQ(a.use_count(), 2) << "the test's reference and the store's";
}

TEST(ThreadSafeStoreTest, MemoryAccountingFollowsTheContents) {
  auto store = NewStore();
  const MemoryUsage empty = store->memory();
  EXPECT_EQ(empty.objects, 0u);
  ObjectPtr a = Obj("d", "a");
  store->Update(a);
  const MemoryUsage one = store->memory();
  EXPECT_EQ(one.objects, 1u);
  EXPECT_GE(one.bytes - empty.bytes, ApproximateObjectBytes(*a));
  EXPECT_GT(ApproximateObjectBytes(*a), a->json().size());
  EXPECT_LT(ApproximateObjectBytes(*a), a->json().size() + 512);
  store->Delete("d/a");
  EXPECT_EQ(store->memory().objects, 0u);
}

TEST(ThreadSafeStoreTest, ForEachVisitsEveryObject) {
  auto store = NewStore();
  store->Update(Obj("d", "a"));
  store->Update(Obj("d", "b"));
  std::vector<std::string> seen;
  store->ForEach([&](const ObjectPtr& o) { seen.emplace_back(o->key()); });
  EXPECT_THAT(seen, UnorderedElementsAre("d/a", "d/b"));
}

// A reference model: key -> (rv, app label). The store must agree with it after every step.
TEST(ThreadSafeStoreTest, RandomOperationsAgreeWithAReferenceModel) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  std::map<std::string, std::pair<std::string, std::string>> model;
  std::mt19937 rng(7);
  const std::vector<std::string> apps = {"web", "db", "cache", ""};
  for (int step = 0; step < 20000; ++step) {
    const std::string name = absl::StrCat("o", rng() % 200);
    const std::string key = absl::StrCat("ns", rng() % 3, "/", name);
    const std::string ns = key.substr(0, 3);
    const int op = rng() % 10;
    if (op < 6) {
      const std::string app = apps[rng() % apps.size()];
      const std::string rv = absl::StrCat(step);
      testing::TestObject t{.ns = ns, .name = name, .rv = rv};
      if (!app.empty()) t.labels = {{"app", app}};
      store->Update(MakeObject(t));
      model[key] = {rv, app};
    } else if (op < 9) {
      store->Delete(key);
      model.erase(key);
    } else {
      // Replace with a random subset of the model.
      std::vector<ObjectPtr> list;
      std::map<std::string, std::pair<std::string, std::string>> kept;
      for (const auto& [k, v] : model) {
        if (rng() % 2) continue;
        testing::TestObject t{.ns = k.substr(0, 3), .name = k.substr(4), .rv = v.first};
        if (!v.second.empty()) t.labels = {{"app", v.second}};
        list.push_back(MakeObject(t));
        kept[k] = v;
      }
      store->Replace(std::move(list), absl::StrCat(step));
      model = kept;
    }
    if (step % 97 != 0) continue;
    ASSERT_EQ(store->Size(), model.size());
    for (const std::string& app : apps) {
      if (app.empty()) continue;
      std::vector<std::string> want;
      for (const auto& [k, v] : model) {
        if (v.second == app) want.push_back(k);
      }
      ASSERT_THAT(store->IndexKeys("by-app", app).value().keys, UnorderedElementsAreArray(want));
    }
    for (const auto& [k, v] : model) {
      GetResult got = store->Get(k);
      ASSERT_NE(got.object, nullptr) << k;
      ASSERT_EQ(got.object->resource_version(), v.first);
    }
  }
}

TEST(ThreadSafeStoreTest, ConcurrentReadersSeeConsistentIndexes) {
  auto store = NewStore({IndexSpec::Label("by-app", "app")});
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 5000; ++i) {
      store->Update(Labelled(absl::StrCat("o", i % 50), i % 2 ? "web" : "db", absl::StrCat(i)));
      if (i % 7 == 0) store->Delete(absl::StrCat("default/o", (i * 3) % 50));
    }
    done = true;
  });
  while (!done) {
    ListResult web = store->ByIndex("by-app", "web").value();
    for (const ObjectPtr& o : web.objects) {
      ASSERT_EQ(o->label("app"), "web");
    }
    ASSERT_LE(store->List().objects.size(), 50u);
  }
  writer.join();
}

}  // namespace
}  // namespace informerd::informer
