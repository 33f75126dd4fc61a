#include "server/informer/shared_informer_factory.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/fake_lister_watcher.h"

namespace informerd::informer {
namespace {

using testing::FakeListerWatcher;

class SharedInformerFactoryTest : public ::testing::Test {
 protected:
  SharedInformerFactory::Builder Builder() {
    return [this]() -> absl::StatusOr<std::unique_ptr<SharedInformer>> {
      ++builds_;
      auto lw = std::make_unique<FakeListerWatcher>();
      lw->Close();  // lists fail at once; these tests need no data
      return SharedInformer::Create({.name = "test",
                                     .lister_watcher = std::move(lw),
                                     .use_streaming_list = false,
                                     .clock = &clock_});
    };
  }
  FakeClock clock_;
  std::atomic<int> builds_{0};
  SharedInformerFactory factory_;
};

InformerKey Pods(std::string ns = "a") {
  return {.cluster = "c", .resource = {"", "v1", "pods"}, .namespace_name = std::move(ns)};
}

TEST_F(SharedInformerFactoryTest, EqualKeysShareOneRunningInformer) {
  auto first = factory_.Acquire(Pods(), Builder()).value();
  auto second = factory_.Acquire(Pods(), Builder()).value();
  EXPECT_EQ(first, second);
  EXPECT_EQ(builds_.load(), 1);
  EXPECT_EQ(factory_.size(), 1u);
  EXPECT_EQ(factory_.Find(Pods()), first);
  EXPECT_EQ(first->Start().code(), absl::StatusCode::kFailedPrecondition) << "already started";
}

TEST_F(SharedInformerFactoryTest, AnyDifferenceInIdentityGivesAnotherInformer) {
  InformerKey base = Pods();
  std::vector<InformerKey> keys = {base, base, base, base, base, base};
  keys[1].cluster = "other";
  keys[2].resource.resource = "configmaps";
  keys[3].namespace_name = "b";
  keys[4].label_selector = "app=web";
  keys[5].transform = "metadata-only";
  std::vector<std::shared_ptr<SharedInformer>> held;
  for (const InformerKey& key : keys) held.push_back(factory_.Acquire(key, Builder()).value());
  EXPECT_EQ(builds_.load(), 6);
  EXPECT_EQ(factory_.size(), 6u);
  EXPECT_EQ(keys[4].ToString(), "c|v1/pods|a|app=web||");
}

TEST_F(SharedInformerFactoryTest, DroppingTheLastUserStopsAndForgetsTheInformer) {
  auto first = factory_.Acquire(Pods(), Builder()).value();
  auto second = factory_.Acquire(Pods(), Builder()).value();
  first.reset();
  EXPECT_EQ(factory_.size(), 1u) << "still held";
  second.reset();
  EXPECT_EQ(factory_.size(), 0u);
  EXPECT_EQ(factory_.Find(Pods()), nullptr);
  auto again = factory_.Acquire(Pods(), Builder()).value();
  EXPECT_EQ(builds_.load(), 2) << "a new informer, started afresh";
}

TEST_F(SharedInformerFactoryTest, BuildErrorsAreReturnedAndNothingIsKept) {
  auto result = factory_.Acquire(Pods(), []() -> absl::StatusOr<std::unique_ptr<SharedInformer>> {
    return absl::InvalidArgumentError("bad selector");
  });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(factory_.size(), 0u);
}

TEST_F(SharedInformerFactoryTest, ConcurrentAcquiresBuildOnce) {
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<SharedInformer>> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { got[i] = factory_.Acquire(Pods(), Builder()).value(); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds_.load(), 1);
  for (const auto& informer : got) EXPECT_EQ(informer, got[0]);
}

}  // namespace
}  // namespace informerd::informer
