// QueueStore against the fake API server serving Queue objects (a registered custom resource, as
// the CRD installs it on a real cluster): saved specs list back equal, replace, removal, one
// replica set's label, and stored objects that are not QueueSpecs.
#include "server/ha/queue_store.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/eventually.h"
#include "base/mutex.h"
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

// A deposed leader (term 10) keeps writing after its successor (term 20) claimed the stored
// queues: its writes and removals are refused, naming the later term, and the successor's spec
// stays. Objects list back with the epoch of their last writer.
TEST_F(QueueStoreTest, AnOlderTermCannotOverwriteOrRemoveWhatALaterTermClaimed) {
  QueueStore old_leader(client_.get(), {.namespace_name = "store", .lease_name = "set-terms"});
  QueueStore new_leader(client_.get(), {.namespace_name = "store", .lease_name = "set-terms"});
  old_leader.BeginTerm(10);
  ASSERT_TRUE(old_leader.Save(Spec("t1", 1000)).ok());
  ASSERT_TRUE(old_leader.Save(Spec("t2", 1000)).ok());

  new_leader.BeginTerm(20);
  absl::StatusOr<std::vector<StoredQueue>> listed = new_leader.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  for (StoredQueue& q : *listed) {
    EXPECT_EQ(q.epoch, 10u) << q.name;
    absl::StatusOr<StoredQueue> claimed = new_leader.Claim(q);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    EXPECT_EQ(claimed->epoch, 20u);
  }
  EXPECT_EQ(new_leader.HighestEpoch().value_or(0), 20u);

  absl::Status late = old_leader.Save(Spec("t1", 5000));
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable) << late;
  EXPECT_THAT(late.message(), HasSubstr("later leader's term (epoch 20 > this replica's 10)"));
  absl::Status late_remove = old_leader.Remove("t2");
  EXPECT_EQ(late_remove.code(), absl::StatusCode::kUnavailable) << late_remove;
  // A claim by the old term is refused too (a restore that lost the race).
  StoredQueue stale = (*listed)[0];
  stale.epoch = 5;  // as listed before either term wrote it
  EXPECT_EQ(old_leader.Claim(stale).status().code(), absl::StatusCode::kUnavailable);

  listed = new_leader.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  for (const StoredQueue& q : *listed) {
    ASSERT_TRUE(q.spec.ok());
    EXPECT_EQ(q.spec->lease_timeout_ms(), 1000) << q.name;
  }
  // The successor's own writes go on.
  ASSERT_TRUE(new_leader.Save(Spec("t1", 3000)).ok());
  ASSERT_TRUE(new_leader.Remove("t2").ok());
}

// A claim written on a resourceVersion that another write moved past reads the object again and
// claims what is there now (never the older spec it listed).
TEST_F(QueueStoreTest, AClaimAfterAConcurrentWriteClaimsTheNewerSpec) {
  QueueStore old_leader(client_.get(), {.namespace_name = "store", .lease_name = "set-race"});
  QueueStore new_leader(client_.get(), {.namespace_name = "store", .lease_name = "set-race"});
  old_leader.BeginTerm(10);
  new_leader.BeginTerm(20);
  ASSERT_TRUE(old_leader.Save(Spec("r1", 1000)).ok());
  absl::StatusOr<std::vector<StoredQueue>> listed = new_leader.List();
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  ASSERT_TRUE(old_leader.Save(Spec("r1", 7000)).ok());  // lands between the list and the claim
  absl::StatusOr<StoredQueue> claimed = new_leader.Claim((*listed)[0]);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_TRUE(claimed->spec.ok());
  EXPECT_EQ(claimed->spec->lease_timeout_ms(), 7000);
  EXPECT_EQ(old_leader.Save(Spec("r1", 9000)).code(), absl::StatusCode::kUnavailable);
  // Removed between the list and the claim: NOT_FOUND, nothing brought back.
  ASSERT_TRUE(new_leader.Save(Spec("r2", 1000)).ok());
  listed = new_leader.List();
  ASSERT_TRUE(listed.ok());
  StoredQueue r2;
  for (StoredQueue& q : *listed) {
    if (q.name == "r2") r2 = q;
  }
  ASSERT_EQ(r2.name, "r2");
  r2.epoch = 0;  // as an older term left it: the claim must write, and finds it gone
  ASSERT_TRUE(new_leader.Remove("r2").ok());
  EXPECT_EQ(new_leader.Claim(r2).status().code(), absl::StatusCode::kNotFound);
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

// The registry's writes through a store: a store whose next Save waits until released, so that
// a second change can be made while the first one's write is under way.
class PausingStore final : public service::QueueSpecStore {
 public:
  explicit PausingStore(QueueStore* inner) : inner_(inner) {}
  void PauseNextSave() {
    MutexLock l(&mu_);
    pause_next_ = true;
    released_ = false;
  }
  void AwaitPaused() {
    MutexLock l(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return paused_; });
  }
  void Release() {
    MutexLock l(&mu_);
    released_ = true;
  }
  absl::Status Save(const v1::QueueSpec& spec) override {
    {
      MutexLock l(&mu_);
      if (pause_next_) {
        pause_next_ = false;
        paused_ = true;
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_; });
        paused_ = false;
      }
    }
    return inner_->Save(spec);
  }
  absl::Status Remove(const std::string& name) override { return inner_->Remove(name); }

 private:
  QueueStore* const inner_;
  Mutex mu_;
  bool pause_next_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

v1::QueueSpec Sourceless(const std::string& name, int64_t lease_timeout_ms) {
  v1::QueueSpec spec;
  spec.set_name(name);
  spec.set_lease_timeout_ms(lease_timeout_ms);
  return spec;
}

// What the store holds for `name` (nullopt: nothing).
std::optional<v1::QueueSpec> StoredSpec(QueueStore* store, const std::string& name) {
  absl::StatusOr<std::vector<StoredQueue>> listed = store->List();
  EXPECT_TRUE(listed.ok()) << listed.status();
  for (StoredQueue& q : listed.value_or(std::vector<StoredQueue>{})) {
    if (q.name == name && q.spec.ok()) return *q.spec;
  }
  return std::nullopt;
}

// Two updates of one queue: the second is made while the first's write is under way. The store
// must end with the spec the registry runs (it used to end with the older one: the writes raced
// outside any lock).
TEST_F(QueueStoreTest, TheStoreEndsWithTheSpecTheRegistryRunsAfterConcurrentUpdates) {
  QueueStore store(client_.get(), {.namespace_name = "store", .lease_name = "set-updates"});
  store.BeginTerm(1);
  PausingStore pausing(&store);
  service::QueueRegistry registry({}, {.store = &pausing});
  ASSERT_TRUE(registry.Create(Sourceless("u", 1000), service::Persist::kYes).ok());

  pausing.PauseNextSave();
  std::thread first([&] { EXPECT_TRUE(registry.Update(Sourceless("u", 2000), false).ok()); });
  pausing.AwaitPaused();
  std::atomic<bool> second_done{false};
  std::thread second([&] {
    EXPECT_TRUE(registry.Update(Sourceless("u", 3000), false).ok());
    second_done = true;
  });
  // Without a lock per queue the second update (and its write) finishes now; with one it waits
  // for the first, and this wait runs out without proving anything.
  (void)Eventually([&] { return second_done.load(); }, absl::Seconds(1));
  pausing.Release();
  first.join();
  second.join();
  const int64_t running = registry.Get("u").value()->spec().lease_timeout_ms();
  std::optional<v1::QueueSpec> stored = StoredSpec(&store, "u");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->lease_timeout_ms(), running);
  EXPECT_EQ(running, 3000);
  registry.ShutDownAll(absl::ZeroDuration());
}

// A delete made while an update's write is under way: the queue must not come back in the store
// (the next leader would create it again).
TEST_F(QueueStoreTest, ADeleteDuringAnUpdatesWriteIsNotUndoneByIt) {
  QueueStore store(client_.get(), {.namespace_name = "store", .lease_name = "set-delete"});
  store.BeginTerm(1);
  PausingStore pausing(&store);
  service::QueueRegistry registry({}, {.store = &pausing});
  ASSERT_TRUE(registry.Create(Sourceless("d", 1000), service::Persist::kYes).ok());

  pausing.PauseNextSave();
  std::thread update([&] { (void)registry.Update(Sourceless("d", 2000), false); });
  pausing.AwaitPaused();
  std::atomic<bool> deleted{false};
  std::thread remove([&] {
    (void)registry.Delete("d");
    deleted = true;
  });
  (void)Eventually([&] { return deleted.load(); }, absl::Seconds(1));
  pausing.Release();
  update.join();
  remove.join();
  EXPECT_FALSE(registry.Get("d").ok());
  EXPECT_FALSE(StoredSpec(&store, "d").has_value());
  registry.ShutDownAll(absl::ZeroDuration());
}

TEST(QueueObjectJsonTest, CarriesTheLabelAndTheSpecInProtoJson) {
  std::string json = QueueObjectJson({.namespace_name = "ns", .lease_name = "l"},
                                     Spec("q", 5), {}, 99, "7");
  EXPECT_THAT(json, HasSubstr(R"("labels":{"informerd.io/lease":"l"})"));
  EXPECT_THAT(json, HasSubstr(R"("annotations":{"informerd.io/epoch":"99"})"));
  EXPECT_THAT(json, HasSubstr(R"("resourceVersion":"7")"));
  EXPECT_THAT(json, HasSubstr(R"("leaseTimeoutMs":"5")"));
  EXPECT_THAT(json, HasSubstr(R"("informerId":"inf-1")"));
}

}  // namespace
}  // namespace informerd::ha
