#include "server/informer/lister.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::UnorderedElementsAre;
using testing::MakeObject;

std::vector<std::string> Keys(const ListResult& r) {
  std::vector<std::string> keys;
  for (const ObjectPtr& o : r.objects) keys.emplace_back(o->key());
  return keys;
}

class ListerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = ThreadSafeStore::Create({}).value();
    store_->Update(MakeObject({.ns = "a", .name = "web", .labels = {{"app", "web"}}}));
    store_->Update(MakeObject({.ns = "a", .name = "db", .labels = {{"app", "db"}}}));
    store_->Update(MakeObject({.ns = "b", .name = "web", .labels = {{"app", "web"}}}));
    store_->SetResourceVersion("77");
  }
  std::unique_ptr<ThreadSafeStore> store_;
};

TEST_F(ListerTest, GetReadsByKey) {
  Lister lister(store_.get());
  EXPECT_EQ(lister.Get("a/web").object->name(), "web");
  EXPECT_EQ(lister.Get("a/web").resource_version, "77");
  EXPECT_EQ(lister.Get("c/x").object, nullptr);
}

TEST_F(ListerTest, ListFiltersByLabelAndFieldSelectors) {
  Lister lister(store_.get());
  EXPECT_THAT(Keys(lister.List(LabelSelector())), UnorderedElementsAre("a/web", "a/db", "b/web"));
  EXPECT_THAT(Keys(lister.List(LabelSelector::Parse("app=web").value())),
              UnorderedElementsAre("a/web", "b/web"));
  EXPECT_THAT(Keys(lister.List(LabelSelector::Parse("app=web").value(),
                               FieldSelector::Parse("metadata.namespace=b").value())),
              UnorderedElementsAre("b/web"));
  EXPECT_THAT(Keys(lister.List(LabelSelector(), FieldSelector::Parse("metadata.name!=web").value())),
              UnorderedElementsAre("a/db"));
  EXPECT_EQ(lister.List(LabelSelector()).resource_version, "77");
}

TEST_F(ListerTest, ListNamespaceUsesTheNamespace) {
  Lister lister(store_.get());
  EXPECT_THAT(Keys(lister.ListNamespace("a", LabelSelector())), UnorderedElementsAre("a/web", "a/db"));
  EXPECT_THAT(Keys(lister.ListNamespace("a", LabelSelector::Parse("app notin (web)").value())),
              UnorderedElementsAre("a/db"));
  EXPECT_TRUE(lister.ListNamespace("zzz", LabelSelector()).objects.empty());
}

}  // namespace
}  // namespace informerd::informer
