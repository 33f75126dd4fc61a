// QueueStore against the fake API server serving Queue objects (a registered custom resource, as
// the CRD installs it on a real cluster): saved specs list back equal, replace, removal, one
// replica set's label, and stored objects that are not QueueSpecs.
#include "server/ha/queue_store.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/testing/daemon_process.h"

namespace informerd::ha {
namespace {

using ::informerd::testing::SharedApiServer;
using ::testing::HasSubstr;

class QueueStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> r = SharedApiServer()->Control(
        "POST", "/_fake/resources",
        R"({"group":"informerd.io","version":"v1alpha1","resource":"queues",
            "kind":"Queue","namespaced":true,"customResource":true})");
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(informerd::testing::SeedConfigMaps("store", 0).ok());  // the namespace
  }
  void SetUp() override {
    client_ = client::Client::Create({.config = SharedApiServer()->config(), .qps = 0}).value();
  }
  std::unique_ptr<client::Client> client_;
};

v1::QueueSpec Spec(const std::string& name, int64_t lease_timeout_ms) {
  v1::QueueSpec spec;
  spec.set_name(name);
  spec.set_lease_timeout_ms(lease_timeout_ms);
  v1::QueueSource* source = spec.add_sources();
  source->set_informer_id("inf-1");
  return spec;
}

TEST_F(QueueStoreTest, TheInformersOfItsSourcesGoAlong) {
  QueueStore store(client_.get(),
                   {.namespace_name = "store",
                    .lease_name = "set-inf",
                    .informer_spec = [](const std::string& id) -> std::optional<v1::InformerSpec> {
                      if (id != "inf-1") return std::nullopt;
                      v1::InformerSpec spec;
                      spec.mutable_resource()->set_version("v1");
                      spec.mutable_resource()->set_resource("configmaps");
                      spec.set_namespace_("team-a");
                      return spec;
                    }});
  v1::QueueSpec spec = Spec("with-informers", 0);
  spec.add_sources()->set_informer_id("unknown-informer");  // not running here: not stored
  ASSERT_TRUE(store.Save(spec).ok());
  absl::StatusOr<std::vector<StoredQueue>> listed = store.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  ASSERT_TRUE((*listed)[0].informers.ok()) << (*listed)[0].informers.status();
  ASSERT_EQ((*listed)[0].informers->size(), 1u);
  EXPECT_EQ((*listed)[0].informers->at(0).namespace_(), "team-a");
  EXPECT_EQ((*listed)[0].informers->at(0).resource().resource(), "configmaps");

  EXPECT_THAT(ParseStoredInformers("q", "{}").status().message(),
              HasSubstr("informerd.io/informers: not a JSON array"));
  EXPECT_THAT(ParseStoredInformers("q", R"([{"resource":7}])").status().message(),
              HasSubstr("informerd.io/informers[0]: not an informerd.v1.InformerSpec"));
}

TEST_F(QueueStoreTest, SavedSpecsListBackAndReplaceAndRemove) {
  QueueStore store(client_.get(), {.namespace_name = "store", .lease_name = "set-a"});
  QueueStore other(client_.get(), {.namespace_name = "store", .lease_name = "set-b"});
  absl::Status saved = store.Save(Spec("q1", 1000));
  ASSERT_TRUE(saved.ok()) << saved;
  ASSERT_TRUE(store.Save(Spec("q2", 0)).ok());
  ASSERT_TRUE(other.Save(Spec("q3", 0)).ok());
  // Saving again replaces (the object exists: read its resourceVersion, write).
  ASSERT_TRUE(store.Save(Spec("q1", 2000)).ok());

  absl::StatusOr<std::vector<StoredQueue>> listed = store.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);  // not set-b's q3
  for (const StoredQueue& q : *listed) {
    ASSERT_TRUE(q.spec.ok()) << q.spec.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        *q.spec, Spec(q.name, q.name == "q1" ? 2000 : 0)))
        << q.spec->DebugString();
  }
  ASSERT_TRUE(store.Remove("q1").ok());
  ASSERT_TRUE(store.Remove("q1").ok());  // nothing to remove: OK
  listed = store.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "q2");
}

TEST_F(QueueStoreTest, AStoredObjectThatIsNotAQueueSpecIsReportedByName) {
  QueueStore store(client_.get(), {.namespace_name = "store", .lease_name = "set-bad"});
  for (const auto& [name, spec] : std::vector<std::pair<std::string, std::string>>{
           {"bad-field", R"({"name":"bad-field","leaseTimeoutMs":"x"})"},
           {"bad-name", R"({"name":"other"})"},
           {"no-spec", ""}}) {
    std::string body = absl::StrCat(
        R"({"apiVersion":"informerd.io/v1alpha1","kind":"Queue","metadata":{"name":")", name,
        R"(","labels":{"informerd.io/lease":"set-bad"}})", spec.empty() ? "" : R"(,"spec":)",
        spec, "}");
    client::HttpRequest request;
    request.method = "POST";
    request.path = "/apis/informerd.io/v1alpha1/namespaces/store/queues";
    request.headers = {{"Content-Type", "application/json"}};
    request.body = body;
    ASSERT_TRUE(client_->Send(std::move(request)).ok()) << name;
  }
  ASSERT_TRUE(store.Save(Spec("good", 0)).ok());
  absl::StatusOr<std::vector<StoredQueue>> listed = store.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 4u);
  for (const StoredQueue& q : *listed) {
    if (q.name == "good") {
      EXPECT_TRUE(q.spec.ok());
      continue;
    }
    ASSERT_FALSE(q.spec.ok()) << q.name;
    EXPECT_THAT(q.spec.status().message(), HasSubstr(absl::StrCat("Queue ", q.name, ": spec")));
  }
}

TEST(QueueObjectJsonTest, CarriesTheLabelAndTheSpecInProtoJson) {
  std::string json = QueueObjectJson({.namespace_name = "ns", .lease_name = "l"},
                                     Spec("q", 5), {}, "7");
  EXPECT_THAT(json, HasSubstr(R"("labels":{"informerd.io/lease":"l"})"));
  EXPECT_THAT(json, HasSubstr(R"("resourceVersion":"7")"));
  EXPECT_THAT(json, HasSubstr(R"("leaseTimeoutMs":"5")"));
  EXPECT_THAT(json, HasSubstr(R"("informerId":"inf-1")"));
}

}  // namespace
}  // namespace informerd::ha
