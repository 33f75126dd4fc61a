// The client against a real kube-apiserver (testing/kube: kube-apiserver + embedded etcd on
// loopback), started for this test and stopped at its end.

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/mutex.h"
#include "client/api_error.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "client/kube_apiserver.h"
#include "client/kubeconfig.h"
#include "client/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const GroupVersionResource kConfigMaps{"", "v1", "configmaps"};

using testing::KubeApiServer;

class Recorder {
 public:
  WatchHandler Handler() {
    return {.on_events =
                [this](std::vector<WatchEvent>& events) {
                  MutexLock l(&mu_);
                  for (const WatchEvent& e : events) {
                    if (e.type == WatchEventType::kBookmark && !e.initial_events_end) continue;
                    entries_.push_back(absl::StrCat(WatchEventTypeName(e.type), " ",
                                                    e.object->name(),
                                                    e.initial_events_end ? "end" : ""));
                  }
                },
            .on_close =
                [this](absl::Status s) {
                  MutexLock l(&mu_);
                  closed_ = true;
                  status_ = std::move(s);
                }};
  }
  std::vector<std::string> WaitFor(size_t n) {
    MutexLock l(&mu_);
    mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entries_.size() >= n || closed_; });
    return entries_;
  }
  absl::Status WaitClosed() {
    MutexLock l(&mu_);
    mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_; });
    return status_;
  }

 private:
  Mutex mu_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

std::string ConfigMap(absl::string_view name) {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", name,
                      R"("},"data":{"k":"v"}})");
}

class KubeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = KubeApiServer::Start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  absl::Status CreateNamespace(const std::string& name) {
    return client::testing::CreateNamespace(*client_, name);
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "testing/kube/start failed (see the log)";
    absl::StatusOr<RestConfig> config = LoadKubeconfig({.paths = {server_->kubeconfig()}});
    ASSERT_TRUE(config.ok()) << config.status();
    client_ = Client::Create({.config = *config}).value();
  }
  static KubeApiServer* server_;
  std::unique_ptr<Client> client_;
};
KubeApiServer* KubeTest::server_ = nullptr;

TEST_F(KubeTest, ListsAndWatchesConfigMaps) {
  const std::string ns = "informerd-list-watch";
  ASSERT_TRUE(CreateNamespace(ns).ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap(absl::StrCat("cm-", i))).ok());
  }
  // Paginated list, all pages from one snapshot.
  std::vector<std::string> names;
  ListOptions options{.namespace_name = ns, .limit = 2};
  std::string rv;
  for (;;) {
    auto page = client_->List(kConfigMaps, options);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& item : page->items) {
      if (item->name() != "kube-root-ca.crt") names.emplace_back(item->name());
      EXPECT_EQ(item->kind(), "ConfigMap");
      EXPECT_EQ(item->namespace_name(), ns);
    }
    rv = page->resource_version;
    if (page->continue_token.empty()) break;
    options.continue_token = page->continue_token;
  }
  EXPECT_THAT(names, ElementsAre("cm-0", "cm-1", "cm-2", "cm-3", "cm-4"));

  // Watch from the list's resourceVersion.
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns, .resource_version = rv},
                              rec.Handler());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("new")).ok());
  ASSERT_TRUE(client_->Patch(kConfigMaps, ns, "new", PatchType::kStrategicMerge,
                             R"({"data":{"k":"v2"}})")
                  .ok());
  ASSERT_TRUE(client_->Delete(kConfigMaps, ns, "new").ok());
  EXPECT_THAT(rec.WaitFor(3), ElementsAre("ADDED new", "MODIFIED new", "DELETED new"));
}

TEST_F(KubeTest, StreamingListSendsInitialEventsThenTheEndBookmark) {
  const std::string ns = "informerd-streaming";
  ASSERT_TRUE(CreateNamespace(ns).ok());
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("only")).ok());
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps,
                              {.namespace_name = ns, .field_selector = "metadata.name=only",
                               .send_initial_events = true},
                              rec.Handler());
  ASSERT_TRUE(watch.ok());
  EXPECT_THAT(rec.WaitFor(2), ElementsAre("ADDED only", "BOOKMARK end"));
}

// kube-apiserver gzips watch streams for clients that offer it, and Debian's libcurl fails
// mid-stream decoding them (CURLE_WRITE_ERROR): watches must not offer gzip. Twenty labelled
// ConfigMaps are enough to reproduce it.
TEST_F(KubeTest, AStreamingListOfManyObjectsArrivesWhole) {
  const std::string ns = "informerd-streaming-many";
  ASSERT_TRUE(CreateNamespace(ns).ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(client_
                    ->Create(kConfigMaps, ns,
                             absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings-)",
                                          i, R"(","labels":{"app":"demo","shard":")", i % 4,
                                          R"("}},"data":{"index":")", i, R"(","greeting":"hello"}})"))
                    .ok());
  }
  Recorder rec;
  // A long timeoutSeconds, as informers use (with a short one the failure did not show).
  auto watch = client_->Watch(
      kConfigMaps, {.namespace_name = ns, .timeout_seconds = 300, .send_initial_events = true},
      rec.Handler());
  ASSERT_TRUE(watch.ok());
  std::vector<std::string> got = rec.WaitFor(21);
  ASSERT_EQ(got.size(), 21u) << rec.WaitClosed();
  EXPECT_EQ(got.back(), "BOOKMARK end");
}

TEST_F(KubeTest, WatchEndsCleanlyAtTimeoutSeconds) {
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps,
                              {.namespace_name = "kube-system", .timeout_seconds = 1},
                              rec.Handler());
  ASSERT_TRUE(watch.ok());
  EXPECT_TRUE(rec.WaitClosed().ok());
}

TEST_F(KubeTest, LargeResponsesArriveCompressed) {
  const std::string ns = "informerd-gzip";
  ASSERT_TRUE(CreateNamespace(ns).ok());
  // kube-apiserver gzips responses over 128 KiB for clients that accept it.
  const std::string payload(100 << 10, 'x');
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_
                    ->Create(kConfigMaps, ns,
                             absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big-)",
                                          i, R"("},"data":{"payload":")", payload, "\"}}"))
                    .ok());
  }
  auto raw = client_->Send(HttpRequest{.path = "/api/v1/namespaces/" + ns + "/configmaps"});
  ASSERT_TRUE(raw.ok()) << raw.status();
  bool gzip = false;
  for (const auto& [k, v] : raw->headers) gzip |= k == "content-encoding" && v == "gzip";
  EXPECT_TRUE(gzip);
  EXPECT_GT(raw->body.size(), 300u << 10);  // handed over decompressed
  auto list = client_->List(kConfigMaps, {.namespace_name = ns});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->items.size(), 3u);
}

TEST_F(KubeTest, ErrorsKeepTheirKubernetesReason) {
  EXPECT_TRUE(client::IsNotFound(client_->Get(kConfigMaps, "default", "does-not-exist").status()));
  auto discovery = client_->discovery().ResourceForKind({"apps", "v1", "Deployment"});
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  EXPECT_EQ(discovery->gvr.resource, "deployments");
}

}  // namespace
}  // namespace informerd::client
