// ThreadSafeStore with StoreOptions::compression = kZstd: the same contract as
// thread_safe_store_test.cc, on objects large enough to compress, plus what compression adds
// (training, plain small objects, relist reuse without decompressing, the true footprint).
#include <atomic>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/lister.h"
#include "server/informer/test_objects.h"
#include "server/informer/thread_safe_store.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

// A Pod of about 2.5 KiB, as an informer stores one (no managedFields): labels, an annotation, an
// owner, a spec with a node and two containers, a status with container statuses.
ObjectPtr Pod(int i, std::string rv = "1", std::string node = "", std::string app = "") {
  if (node.empty()) node = absl::StrCat("node-", i % 5);
  if (app.empty()) app = i % 2 == 0 ? "web" : "db";
  return testing::MakeObject(
      {.ns = absl::StrCat("team-", i % 3),
       .name = absl::StrCat("pod-", i),
       .rv = std::move(rv),
       .labels = {{"app", app}, {"pod-template-hash", "7d9f8c6b5"}},
       .kind = "Pod",
       .owner_references = absl::StrCat(R"([{"apiVersion":"apps/v1","kind":"ReplicaSet","name":")",
                                        app, R"(-7d9f8c6b5","uid":"rs-uid-)", app,
                                        R"(","controller":true,"blockOwnerDeletion":true}])"),
       .extra_metadata = absl::StrCat(R"("annotations":{"checksum/config":")", i * 7919,
                                      R"("},"creationTimestamp":"2024-05-01T10:00:00Z")"),
       .extra = absl::StrCat(
           R"("spec":{"nodeName":")", node,
           R"(","containers":[{"name":"main","image":"registry.example.com/team/)", app,
           R"(:1.2.3","ports":[{"containerPort":8080,"protocol":"TCP"}],)",
           R"("env":[{"name":"POD_INDEX","value":")", i,
           R"("},{"name":"LOG_LEVEL","value":"info"}],)",
           R"("resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"memory":"256Mi"}},)",
           R"("volumeMounts":[{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}]},)",
           R"({"name":"sidecar","image":"registry.example.com/platform/proxy:2.0.1","args":["--port=15001","--admin=15000"],)",
           R"("readinessProbe":{"httpGet":{"path":"/ready","port":15000,"scheme":"HTTP"},"periodSeconds":5,"failureThreshold":3},)",
           R"("resources":{"requests":{"cpu":"10m","memory":"32Mi"}}}],)",
           R"("restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",)",
           R"("serviceAccountName":"default","schedulerName":"default-scheduler",)",
           R"("tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},)",
           R"("status":{"phase":"Running","podIP":"10.0.)", i / 250, ".", i % 250,
           R"(","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2024-05-01T10:00:05Z"}],)",
           R"("containerStatuses":[{"name":"main","ready":true,"restartCount":0,"image":"registry.example.com/team/)", app,
           R"(:1.2.3","containerID":"containerd://)", absl::StrCat(absl::Hex(0x9a8b7c6d5e4f3a2bull * (i + 1))),
           R"(","state":{"running":{"startedAt":"2024-05-01T10:00:03Z"}}},)",
           R"({"name":"sidecar","ready":true,"restartCount":)", i % 3,
           R"(,"image":"registry.example.com/platform/proxy:2.0.1","containerID":"containerd://)",
           absl::StrCat(absl::Hex(0x1f2e3d4c5b6a7988ull * (i + 7))),
           R"(","state":{"running":{"startedAt":"2024-05-01T10:00:04Z"}}}]})")});
}

std::unique_ptr<ThreadSafeStore> Compressed(std::vector<IndexSpec> indexers = {}) {
  return ThreadSafeStore::Create(
             {.indexers = std::move(indexers), .compression = StoreCompression::kZstd})
      .value();
}

// Enough pods (1.2 MiB of JSON) for the store to train its dictionary at the drain.
constexpr int kListed = 1000;

std::vector<IndexSpec> PodIndexes() {
  return {IndexSpec::Label("by-app", "app"), IndexSpec::Field("by-node", "spec.nodeName"),
          IndexSpec::Owner("by-owner")};
}

std::vector<std::string> Jsons(const std::vector<ObjectPtr>& objects) {
  std::vector<std::string> out;
  for (const ObjectPtr& o : objects) out.emplace_back(o->json());
  return out;
}

// Fills `store` with pods 0..n-1 as an informer's first list does: updates, then the drain.
std::vector<ObjectPtr> FillAsAList(ThreadSafeStore& store, int n) {
  std::vector<ObjectPtr> pods;
  for (int i = 0; i < n; ++i) {
    pods.push_back(Pod(i));
    store.Update(pods.back());
  }
  store.SetResourceVersion("100");
  return pods;
}

TEST(CompressedStoreTest, ReadsReturnTheObjectsAsStoredAndTheStoreShrinks) {
  auto compressed = Compressed(PodIndexes());
  auto plain = ThreadSafeStore::Create({.indexers = PodIndexes()}).value();
  const std::vector<ObjectPtr> pods = FillAsAList(*compressed, kListed);
  for (const ObjectPtr& p : pods) plain->Update(p);

  for (const ObjectPtr& p : pods) {
    const GetResult got = compressed->Get(p->key());
    ASSERT_NE(got.object, nullptr) << p->key();
    EXPECT_NE(got.object, p) << "decompressed, not the object given";
    EXPECT_EQ(got.object->json(), p->json());
    EXPECT_EQ(got.object->annotation("checksum/config"), p->annotation("checksum/config"));
    EXPECT_EQ(got.resource_version, "100");
  }
  EXPECT_THAT(Jsons(compressed->List().objects), UnorderedElementsAreArray(Jsons(pods)));
  EXPECT_EQ(compressed->Get("team-0/missing").object, nullptr);

  const MemoryUsage c = compressed->memory();
  const MemoryUsage p = plain->memory();
  EXPECT_EQ(c.objects, size_t{kListed});
  size_t json = 0;
  for (const ObjectPtr& pod : pods) json += pod->json().size();
  // The issue's target row: at most the compact JSON (a plain store holds 1.3x it).
  EXPECT_LT(c.bytes, json) << "compressed " << c.bytes << ", plain " << p.bytes;
  EXPECT_LT(c.bytes, p.bytes);
  std::cerr << kListed << " pods: compact JSON " << json << " bytes, plain store " << p.bytes
            << ", compressed store " << c.bytes << "\n";
}

TEST(CompressedStoreTest, IndexesAndSelectorsWork) {
  auto store = Compressed(PodIndexes());
  FillAsAList(*store, kListed);
  const ListResult on_node = store->ByIndex("by-node", "node-3").value();
  EXPECT_EQ(on_node.objects.size(), 200u);
  for (const ObjectPtr& o : on_node.objects) {
    EXPECT_THAT(std::string(o->json()), HasSubstr(R"("nodeName":"node-3")"));
  }
  EXPECT_EQ(store->IndexKeys("by-app", "web").value().keys.size(), 500u);
  EXPECT_EQ(store->ByIndex("by-owner", "ReplicaSet/db-7d9f8c6b5").value().objects.size(), 500u);
  EXPECT_EQ(store->ListNamespace("team-1").objects.size(), 333u);
  EXPECT_EQ(store->Index("by-node", *Pod(3)).value().objects.size(), 200u);

  Lister lister(store.get());
  ListResult selected = lister.ListNamespace("team-0", LabelSelector::Parse("app=web").value(),
                                             FieldSelector::Parse("spec.nodeName=node-0").value());
  std::set<std::string> keys, expected;
  for (const ObjectPtr& o : selected.objects) keys.emplace(o->key());
  // i % 3 == 0, i even, i % 5 == 0: i % 30 == 0.
  for (int i = 0; i < kListed; i += 30) expected.insert(absl::StrCat("team-0/pod-", i));
  EXPECT_EQ(keys, expected);

  // An index added later indexes the compressed objects by their contents.
  ASSERT_TRUE(store->AddIndexers({IndexSpec::Field("by-ip", "status.podIP")}).ok());
  EXPECT_THAT(store->IndexKeys("by-ip", "10.0.0.7").value().keys, ElementsAre("team-1/pod-7"));
}

TEST(CompressedStoreTest, UpdatesAndDeletesMoveIndexValuesAndReturnWholeObjects) {
  auto store = Compressed(PodIndexes());
  const std::vector<ObjectPtr> pods = FillAsAList(*store, kListed);
  // pod-3 moves from node-3 to node-x and from db to web.
  ObjectPtr moved = Pod(3, "2", "node-x", "web");
  ObjectPtr previous = store->Update(moved);
  ASSERT_NE(previous, nullptr);
  EXPECT_EQ(previous->json(), pods[3]->json()) << "the whole previous object";
  EXPECT_THAT(store->IndexKeys("by-node", "node-x").value().keys, ElementsAre("team-0/pod-3"));
  EXPECT_EQ(store->ByIndex("by-node", "node-3").value().objects.size(), 199u);
  EXPECT_EQ(store->IndexKeys("by-app", "web").value().keys.size(), 501u);
  EXPECT_EQ(store->Get("team-0/pod-3").object->json(), moved->json());

  ObjectPtr removed = store->Delete("team-0/pod-3");
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->json(), moved->json());
  EXPECT_THAT(store->IndexKeys("by-node", "node-x").value().keys, IsEmpty());
  EXPECT_THAT(store->ListIndexFuncValues("by-node").value().values,
              UnorderedElementsAre("node-0", "node-1", "node-2", "node-3", "node-4"));
  EXPECT_EQ(store->Size(), size_t{kListed} - 1);
}

TEST(CompressedStoreTest, RelistOfTheSameVersionsKeepsTheFramesWithoutDecompressing) {
  auto store = Compressed(PodIndexes());
  FillAsAList(*store, kListed);
  const MemoryUsage before = store->memory();
  // A relist: new Objects of the same versions (not shared: the cache holds none to share).
  std::vector<ObjectPtr> relisted;
  for (int i = 0; i < kListed; ++i) {
    relisted.push_back(Pod(i));
    EXPECT_EQ(store->GetUnchanged(*relisted.back()), nullptr);
  }
  for (const ObjectPtr& p : relisted) {
    EXPECT_EQ(store->Update(p), p) << "the same version: the object given is the previous one";
  }
  EXPECT_EQ(store->memory().bytes, before.bytes);
  // Replace keeps what is unchanged and removes what is missing.
  relisted.resize(500);
  relisted.push_back(Pod(7, "9", "node-y"));
  store->Replace(relisted, "200");
  EXPECT_EQ(store->Size(), 500u);
  EXPECT_EQ(store->ResourceVersion(), "200");
  EXPECT_THAT(store->IndexKeys("by-node", "node-y").value().keys, ElementsAre("team-1/pod-7"));
  EXPECT_EQ(store->Get("team-1/pod-7").object->resource_version(), "9");
  EXPECT_EQ(store->Get("team-2/pod-800").object, nullptr);
  EXPECT_LT(store->memory().bytes, before.bytes);
}

TEST(CompressedStoreTest, ObjectsStayPlainUntilTrainingAndWhenTooSmall) {
  auto store = Compressed();
  ObjectPtr first = Pod(0);
  store->Update(first);
  EXPECT_EQ(store->Get(first->key()).object, first) << "before training: kept as given";
  EXPECT_EQ(store->GetUnchanged(*Pod(0)), first);
  store->SetResourceVersion("5");  // a drain with too little to train on
  EXPECT_EQ(store->Get(first->key()).object, first);

  for (int i = 1; i < kListed; ++i) store->Update(Pod(i));
  store->SetResourceVersion("6");  // trains; what was stored is compressed
  EXPECT_NE(store->Get(first->key()).object, first);
  EXPECT_EQ(store->Get(first->key()).object->json(), first->json());
  EXPECT_EQ(store->GetUnchanged(*Pod(0)), nullptr);

  ObjectPtr tiny = testing::MakeObject({.ns = "d", .name = "t"});
  store->Update(tiny);
  EXPECT_EQ(store->Get("d/t").object, tiny) << "too small to gain: kept plain";
}

TEST(CompressedStoreTest, TrainsWithoutADrainOnceEnoughIsStored) {
  auto store = Compressed();
  std::vector<ObjectPtr> pods;
  size_t bytes = 0;
  for (int i = 0; bytes < ThreadSafeStore::kTrainBytes + 4096; ++i) {
    pods.push_back(Pod(i));
    bytes += pods.back()->json().size();
    store->Update(pods.back());
  }
  EXPECT_NE(store->Get(pods[0]->key()).object, pods[0]) << "compressed without a drain";
  EXPECT_EQ(store->Get(pods[0]->key()).object->json(), pods[0]->json());
  EXPECT_LT(store->memory().bytes, bytes);
}

TEST(CompressedStoreTest, ForEachVisitsWholeObjectsAndForEachKeyTheKeys) {
  auto store = Compressed();
  const std::vector<ObjectPtr> pods = FillAsAList(*store, kListed);
  std::vector<std::string> seen, keys, expected_keys;
  store->ForEach([&](const ObjectPtr& o) { seen.emplace_back(o->json()); });
  EXPECT_THAT(seen, UnorderedElementsAreArray(Jsons(pods)));
  store->ForEachKey([&](absl::string_view key) { keys.emplace_back(key); });
  for (const ObjectPtr& p : pods) expected_keys.emplace_back(p->key());
  EXPECT_THAT(keys, UnorderedElementsAreArray(expected_keys));
}

TEST(CompressedStoreTest, ASnapshotHoldsFramesAndUnpacksEachObjectWhenTaken) {
  auto store = Compressed();
  const std::vector<ObjectPtr> pods = FillAsAList(*store, kListed);
  std::unique_ptr<ObjectSnapshot> snapshot = store->Snapshot();
  ASSERT_EQ(snapshot->size(), pods.size());
  // The store changes after the snapshot: the snapshot keeps the instant it was taken.
  store->Update(Pod(0, "2"));
  store->Delete(pods[1]->key());
  const size_t before = store->memory().bytes;
  std::vector<std::string> taken;
  for (size_t i = 0; i < snapshot->size(); ++i) {
    ObjectPtr object = snapshot->Take(i);
    ASSERT_NE(object, nullptr);
    EXPECT_EQ(object->resource_version(), "1") << object->key();
    taken.emplace_back(object->json());
  }
  EXPECT_THAT(taken, UnorderedElementsAreArray(Jsons(pods)));
  // Taking objects decompressed them for the taker; the store holds what it held.
  EXPECT_EQ(store->memory().bytes, before);
}

TEST(CompressedStoreTest, ConcurrentReadersDuringUpdatesSeeWholeObjects) {
  auto store = Compressed(PodIndexes());
  FillAsAList(*store, kListed);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      const ListResult web = store->ByIndex("by-app", "web").value();
      for (const ObjectPtr& o : web.objects) {
        ASSERT_EQ(o->label("app"), "web");
        ASSERT_NE(o->annotation("checksum/config"), std::nullopt);
      }
    }
  });
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < kListed; ++i) store->Update(Pod(i, absl::StrCat(round + 2)));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(store->Get("team-1/pod-1").object->resource_version(), "6");
}

}  // namespace
}  // namespace informerd::informer
