// An informer-bound queue against testing/apiserver (a real process on a real socket): the
// informer's objects become keys delivered to a Work stream, and so do later changes.
//
// The informer is built by the fixture and found through QueueRegistry's InformerLookup seam
// rather than through an InformerRegistry, which would need a Clusters entry for the fake server;
// the binding code is the same either way.
#include <set>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/apiserver_fixture.h"
#include "server/service/queue_test_util.h"

namespace informerd::service {
namespace {

using testing::QueueServer;
using testing::Spec;
using testing::WorkerStream;

TEST(QueueBindingTest, InformerObjectsAndLaterChangesBecomeDeliveredKeys) {
  informer::testing::ApiServerFixture fixture("queue-binding");
  ASSERT_TRUE(fixture.Seed(5).ok());
  std::shared_ptr<informer::SharedInformer> informer = fixture.NewInformer({});
  ASSERT_TRUE(informer->Start().ok());
  ASSERT_TRUE(fixture.WaitConverged(*informer).ok());

  QueueServer s([&](absl::string_view id) {
    return id == "configmaps" ? informer : nullptr;
  });
  v1::QueueSpec spec = Spec("cms");
  spec.add_sources()->set_informer_id("configmaps");
  ASSERT_TRUE(s.CreateQueue(spec).ok());

  WorkerStream w(s.work(), "cms", 100);
  ASSERT_NE(w.ReadStarted(), "");
  std::set<std::string> keys;
  while (keys.size() < 5) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty());
    for (const v1::Lease& x : l) {
      keys.insert(x.key());
      ASSERT_TRUE(w.Send(x, v1::Outcome::SUCCESS));
    }
  }
  for (const std::string& k : keys) EXPECT_EQ(k.rfind(fixture.ns() + "/", 0), 0u) << k;

  ASSERT_TRUE(fixture.Create("created-later").ok());
  const std::string want = fixture.ns() + "/created-later";
  bool seen = false;
  while (!seen) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty());
    for (const v1::Lease& x : l) {
      seen |= x.key() == want;
      ASSERT_TRUE(w.Send(x, v1::Outcome::SUCCESS));
    }
  }
  EXPECT_GE(s.State("cms").adds(), 6u);
  // Deleting the queue unregisters its handler from the informer, which keeps running.
  ASSERT_TRUE(s.registry().Delete("cms").ok());
  ASSERT_TRUE(fixture.Create("after-delete").ok());
  EXPECT_TRUE(fixture.WaitConverged(*informer).ok());
}

TEST(QueueBindingTest, BindingsNameBadIndexLookups) {
  informer::testing::ApiServerFixture fixture("queue-binding-bad");
  std::shared_ptr<informer::SharedInformer> informer = fixture.NewInformer({});
  QueueServer s([&](absl::string_view id) {
    return id == "configmaps" ? informer : nullptr;
  });
  v1::QueueSpec spec = Spec("cms");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id("configmaps");
  src->mutable_index()->set_informer_id("configmaps");
  src->mutable_index()->set_index_name("no-such-index");
  grpc::Status st = s.CreateQueue(spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("spec.sources[0].index.index_name"));
  src->mutable_index()->set_informer_id("nope");
  EXPECT_EQ(s.CreateQueue(spec).error_code(), grpc::StatusCode::NOT_FOUND);
  src->clear_index();
  src->set_label_selector("app in (");
  st = s.CreateQueue(spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("spec.sources[0].label_selector"));
}

}  // namespace
}  // namespace informerd::service
