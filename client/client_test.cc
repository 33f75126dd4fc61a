#include "client/client.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mutex.h"
#include "client/api_error.h"
#include "client/fake_apiserver.h"
#include "client/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::FakeApiServer;

const GroupVersionResource kConfigMaps{"", "v1", "configmaps"};
const GroupVersionResource kNamespaces{"", "v1", "namespaces"};
const GroupVersionResource kDeployments{"apps", "v1", "deployments"};

std::string ConfigMap(absl::string_view name, absl::string_view labels = "{}") {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", name,
                      R"(","labels":)", labels, R"(},"data":{"k":"v"}})");
}

// Records what a watch delivers.
class Recorder {
 public:
  WatchHandler Handler() {
    return {.on_events =
                [this](std::vector<WatchEvent>& events) {
                  MutexLock l(&mu_);
                  for (const WatchEvent& e : events) {
                    std::string entry = absl::StrCat(WatchEventTypeName(e.type), " ",
                                                     e.object->name());
                    if (e.initial_events_end) entry += " initial-events-end";
                    entries_.push_back(entry);
                    last_rv_ = std::string(e.object->resource_version());
                  }
                },
            .on_close =
                [this](absl::Status s) {
                  MutexLock l(&mu_);
                  closed_ = true;
                  status_ = std::move(s);
                }};
  }
  // Waits until `n` events arrived.
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
  std::vector<std::string> entries() {
    MutexLock l(&mu_);
    return entries_;
  }
  std::string last_rv() {
    MutexLock l(&mu_);
    return last_rv_;
  }

 private:
  Mutex mu_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mu_);
  std::string last_rv_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = FakeApiServer::Start({}).value().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    client_ = Client::Create({.config = server_->config(), .user_agent = UserAgent()}).value();
  }
  void TearDown() override {
    client_.reset();
    server_->Control("DELETE", "/_fake/faults").IgnoreError();
  }
  // A namespace of this test's own, with `count` seeded configmaps named seed-0000000...
  std::string Namespace(int count = 0, int bytes = 0) {
    std::string ns = absl::AsciiStrToLower(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    EXPECT_TRUE(server_
                    ->Control("POST", "/_fake/seed",
                              absl::StrCat(R"({"resource":"configmaps","namespace":")", ns,
                                           R"(","count":)", count,
                                           bytes ? absl::StrCat(R"(,"bytes":)", bytes) : "", "}"))
                    .ok());
    return ns;
  }
  // Faults are matched by user agent, so each test only faults its own requests.
  static std::string UserAgent() {
    return absl::StrCat("informerd-test-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void Fault(absl::string_view json_fields) {
    ASSERT_TRUE(server_
                    ->Control("POST", "/_fake/faults",
                              absl::StrCat("{", json_fields, R"(,"userAgent":")", UserAgent(),
                                           "\"}"))
                    .ok());
  }

  static FakeApiServer* server_;
  std::unique_ptr<Client> client_;
};
FakeApiServer* ClientTest::server_ = nullptr;

TEST_F(ClientTest, DiscoveryMapsResourcesToKindsAndScope) {
  absl::StatusOr<ResourceInfo> cm = client_->discovery().Resource(kConfigMaps);
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ(cm->kind, "ConfigMap");
  EXPECT_TRUE(cm->namespaced);
  EXPECT_EQ(cm->BasePath(), "/api/v1");
  auto ns = client_->discovery().Resource(kNamespaces);
  ASSERT_TRUE(ns.ok());
  EXPECT_FALSE(ns->namespaced);
  auto deploy = client_->discovery().ResourceForKind({"apps", "v1", "Deployment"});
  ASSERT_TRUE(deploy.ok()) << deploy.status();
  EXPECT_EQ(deploy->gvr, kDeployments);
  EXPECT_EQ(deploy->BasePath(), "/apis/apps/v1");
  EXPECT_TRUE(absl::IsNotFound(client_->discovery().Resource({"", "v1", "nothings"}).status()));
}

TEST_F(ClientTest, DiscoveryRefreshesOnAMissSoLaterCrdsResolve) {
  const GroupVersionResource widgets{"example.com", "v1", "widgets"};
  ASSERT_TRUE(client_->discovery().Resource(kConfigMaps).ok());
  const int before = client_->discovery().refreshes();
  ASSERT_TRUE(server_
                  ->Control("POST", "/_fake/resources",
                            R"({"group":"example.com","version":"v1","resource":"widgets","kind":"Widget","namespaced":true,"customResource":true})")
                  .ok());
  auto w = client_->discovery().Resource(widgets);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->kind, "Widget");
  EXPECT_EQ(client_->discovery().refreshes(), before + 1);
  ASSERT_TRUE(client_->discovery().Resource(kConfigMaps).ok());  // a hit: no refresh
  EXPECT_EQ(client_->discovery().refreshes(), before + 1);
}

TEST_F(ClientTest, DiscoveryMissesOfNamesThatDoNotExistAreRateLimited) {
  ASSERT_TRUE(client_->discovery().Resource(kConfigMaps).ok());
  const int before = client_->discovery().refreshes();
  // A client trying random names: at most the burst of refreshes (3), not one per name.
  for (int i = 0; i < 50; ++i) {
    const GroupVersionResource random{"example.com", "v1", absl::StrCat("nothing", i)};
    EXPECT_TRUE(absl::IsNotFound(client_->discovery().Resource(random).status()));
    EXPECT_TRUE(absl::IsNotFound(
        client_->discovery().ResourceForKind({"example.com", "v1", absl::StrCat("No", i)}).status()));
  }
  EXPECT_LE(client_->discovery().refreshes(), before + 3);
  EXPECT_GE(client_->discovery().refreshes(), before + 1);
  // Hits still answer, without a refresh.
  const int after = client_->discovery().refreshes();
  ASSERT_TRUE(client_->discovery().Resource(kConfigMaps).ok());
  EXPECT_EQ(client_->discovery().refreshes(), after);
}

TEST_F(ClientTest, LegacyDiscoveryFindsTheSameResources) {
  auto legacy = Discovery::Create({.fetch =
                                       [this](const std::string& path, const std::string& accept)
                                           -> absl::StatusOr<Discovery::Response> {
                                         auto r = client_->Send(HttpRequest{
                                             .path = path, .headers = {{"Accept", accept}}});
                                         if (!r.ok()) return r.status();
                                         return Discovery::Response{r->content_type, r->body};
                                       },
                                   .aggregated = false})
                    .value();
  auto deploy = legacy->Resource(kDeployments);
  ASSERT_TRUE(deploy.ok()) << deploy.status();
  EXPECT_EQ(deploy->kind, "Deployment");
  EXPECT_TRUE(deploy->namespaced);
  auto ns = legacy->Resource(kNamespaces);
  ASSERT_TRUE(ns.ok());
  EXPECT_FALSE(ns->namespaced);
}

TEST_F(ClientTest, CreateGetUpdatePatchDelete) {
  const std::string ns = Namespace();
  auto created = client_->Create(kConfigMaps, ns, ConfigMap("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->key(), ns + "/a");
  EXPECT_FALSE((*created)->uid().empty());
  EXPECT_TRUE(client::IsAlreadyExists(client_->Create(kConfigMaps, ns, ConfigMap("a")).status()));

  auto got = client_->Get(kConfigMaps, ns, "a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)->resource_version(), (*created)->resource_version());

  const std::string stale = absl::StrCat(
      R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":")",
      (*created)->resource_version(), R"("},"data":{"k":"v2"}})");
  auto updated = client_->Update(kConfigMaps, ns, "a", stale);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_NE((*updated)->resource_version(), (*created)->resource_version());
  EXPECT_TRUE(IsConflict(client_->Update(kConfigMaps, ns, "a", stale).status()));

  auto merged = client_->Patch(kConfigMaps, ns, "a", PatchType::kMerge,
                               R"({"metadata":{"labels":{"m":"1"}}})");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ((*merged)->label("m"), "1");
  auto strategic = client_->Patch(kConfigMaps, ns, "a", PatchType::kStrategicMerge,
                                  R"({"metadata":{"labels":{"s":"2"}}})");
  ASSERT_TRUE(strategic.ok()) << strategic.status();
  EXPECT_EQ((*strategic)->label("s"), "2");
  EXPECT_EQ((*strategic)->label("m"), "1");
  auto json = client_->Patch(kConfigMaps, ns, "a", PatchType::kJson,
                             R"([{"op":"add","path":"/metadata/labels/j","value":"3"}])");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)->label("j"), "3");

  EXPECT_TRUE(IsConflict(
      client_->Delete(kConfigMaps, ns, "a", {.precondition_uid = "not-the-uid"})));
  ASSERT_TRUE(client_->Delete(kConfigMaps, ns, "a",
                              {.propagation_policy = "Background",
                               .precondition_uid = std::string((*created)->uid())})
                  .ok());
  EXPECT_TRUE(client::IsNotFound(client_->Get(kConfigMaps, ns, "a").status()));
  EXPECT_TRUE(client::IsNotFound(client_->Delete(kConfigMaps, ns, "a")));
}

TEST_F(ClientTest, ScopeIsChecked) {
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Get(kNamespaces, "default", "x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Get(kConfigMaps, "", "x").status()));
  auto namespaces = client_->List(kNamespaces, {});
  ASSERT_TRUE(namespaces.ok()) << namespaces.status();
  EXPECT_GE(namespaces->items.size(), 4u);
  EXPECT_EQ(namespaces->items[0]->kind(), "Namespace");  // filled in for list items
}

TEST_F(ClientTest, ListPaginatesWithLimitAndContinue) {
  const std::string ns = Namespace(25);
  std::vector<std::string> names;
  ListOptions options{.namespace_name = ns, .limit = 10};
  int pages = 0;
  std::string first_rv;
  for (;;) {
    absl::StatusOr<ListResult> page = client_->List(kConfigMaps, options);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    if (first_rv.empty()) first_rv = page->resource_version;
    EXPECT_EQ(page->resource_version, first_rv);  // one snapshot across pages
    for (const auto& item : page->items) {
      names.emplace_back(item->name());
      EXPECT_EQ(item->kind(), "ConfigMap");
      EXPECT_EQ(item->api_version(), "v1");
      EXPECT_THAT(std::string(item->json()), HasSubstr(R"({"kind":"ConfigMap","apiVersion":"v1",)"));
    }
    if (page->continue_token.empty()) break;
    EXPECT_TRUE(page->remaining_item_count.has_value());
    options.continue_token = page->continue_token;
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(names.size(), 25u);
  EXPECT_EQ(names.front(), "seed-0000000");
  EXPECT_EQ(names.back(), "seed-0000024");
  EXPECT_FALSE(first_rv.empty());
}

TEST_F(ClientTest, ExpiredContinueIsAnErrorTheReflectorCanActOn) {
  const std::string ns = Namespace(5);
  auto first = client_->List(kConfigMaps, {.namespace_name = ns, .limit = 2});
  ASSERT_TRUE(first.ok());
  Fault(R"("type":"gone","verb":"list")");
  auto second = client_->List(kConfigMaps, {.namespace_name = ns, .limit = 2,
                                            .continue_token = first->continue_token});
  EXPECT_TRUE(IsExpired(second.status())) << second.status();
  EXPECT_EQ(ApiErrorCode(second.status()), 410);
  ASSERT_TRUE(GetApiError(second.status()).has_value());
  EXPECT_FALSE(GetApiError(second.status())->continue_token.empty());
}

TEST_F(ClientTest, ListHonoursResourceVersionMatch) {
  const std::string ns = Namespace(2);
  auto latest = client_->List(kConfigMaps, {.namespace_name = ns});
  ASSERT_TRUE(latest.ok());
  auto any = client_->List(kConfigMaps, {.namespace_name = ns, .resource_version = "0",
                                         .resource_version_match = "NotOlderThan"});
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->items.size(), 2u);
  auto exact = client_->List(kConfigMaps, {.namespace_name = ns,
                                           .resource_version = latest->resource_version,
                                           .resource_version_match = "Exact"});
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->resource_version, latest->resource_version);
  EXPECT_TRUE(IsInvalid(client_->List(kConfigMaps, {.namespace_name = ns,
                                                    .resource_version_match = "Exact"})
                            .status()));
}

TEST_F(ClientTest, BlockingCallsFromAWatchCallbackFailInsteadOfDeadlocking) {
  const std::string ns = Namespace(1);
  struct {
    Mutex mu;
    absl::Status inner ABSL_GUARDED_BY(mu) = absl::OkStatus();
    bool called ABSL_GUARDED_BY(mu) = false;
  } seen;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns},
                              {.on_events = [&](std::vector<WatchEvent>&) {
                                 absl::Status s = client_->Get(kConfigMaps, ns, "x").status();
                                 MutexLock l(&seen.mu);
                                 seen.inner = s;
                                 seen.called = true;
                               }});
  ASSERT_TRUE(watch.ok());
  MutexLock l(&seen.mu);
  seen.mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(seen.mu) { return seen.called; });
  EXPECT_TRUE(absl::IsFailedPrecondition(seen.inner)) << seen.inner;
}

TEST_F(ClientTest, ListFiltersBySelectors) {
  const std::string ns = Namespace(10);
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("tagged", R"({"tier":"web"})")).ok());
  auto by_label = client_->List(kConfigMaps, {.namespace_name = ns, .label_selector = "tier in (web,db)"});
  ASSERT_TRUE(by_label.ok()) << by_label.status();
  ASSERT_EQ(by_label->items.size(), 1u);
  EXPECT_EQ(by_label->items[0]->name(), "tagged");
  auto bucket = client_->List(kConfigMaps, {.namespace_name = ns,
                                            .label_selector = "fake.informerd.io/bucket=3,!tier"});
  ASSERT_TRUE(bucket.ok());
  ASSERT_EQ(bucket->items.size(), 1u);
  EXPECT_EQ(bucket->items[0]->name(), "seed-0000003");
  auto by_field = client_->List(kConfigMaps, {.namespace_name = ns,
                                              .field_selector = "metadata.name=seed-0000007"});
  ASSERT_TRUE(by_field.ok());
  ASSERT_EQ(by_field->items.size(), 1u);
  EXPECT_TRUE(IsBadRequest(
      client_->List(kConfigMaps, {.namespace_name = ns, .field_selector = "spec.nope=1"}).status()));
}

TEST_F(ClientTest, WatchDeliversEveryEventTypeFromTheListResourceVersion) {
  const std::string ns = Namespace(2);
  auto list = client_->List(kConfigMaps, {.namespace_name = ns});
  ASSERT_TRUE(list.ok());
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns,
                                            .resource_version = list->resource_version},
                              rec.Handler());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("w")).ok());
  ASSERT_TRUE(client_->Patch(kConfigMaps, ns, "w", PatchType::kMerge,
                             R"({"data":{"k":"changed"}})")
                  .ok());
  ASSERT_TRUE(client_->Delete(kConfigMaps, ns, "w").ok());
  EXPECT_THAT(rec.WaitFor(3), ElementsAre("ADDED w", "MODIFIED w", "DELETED w"));
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults",
                               absl::StrCat(R"({"type":"bookmark","namespace":")", ns, "\"}"))
                  .ok());
  EXPECT_EQ(rec.WaitFor(4).back(), "BOOKMARK ");
}

TEST_F(ClientTest, StreamingListEndsInitialEventsWithABookmark) {
  const std::string ns = Namespace(3);
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns, .send_initial_events = true},
                              rec.Handler());
  ASSERT_TRUE(watch.ok());
  EXPECT_THAT(rec.WaitFor(4), ElementsAre("ADDED seed-0000000", "ADDED seed-0000001",
                                          "ADDED seed-0000002", "BOOKMARK  initial-events-end"));
}

TEST_F(ClientTest, WatchEndsCleanlyAtItsTimeout) {
  const std::string ns = Namespace(1);
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns, .timeout_seconds = 1},
                              rec.Handler());
  ASSERT_TRUE(watch.ok());
  EXPECT_TRUE(rec.WaitClosed().ok());
  EXPECT_THAT(rec.entries(), ElementsAre("ADDED seed-0000000"));
}

TEST_F(ClientTest, GoneAtTheStartOfAWatchAsStatusOrAsErrorEvent) {
  const std::string ns = Namespace(1);
  Fault(R"("type":"gone","verb":"watch","mode":"status")");
  Recorder as_status;
  auto w1 = client_->Watch(kConfigMaps, {.namespace_name = ns, .resource_version = "1"},
                           as_status.Handler());
  ASSERT_TRUE(w1.ok());
  EXPECT_TRUE(IsExpired(as_status.WaitClosed())) << as_status.WaitClosed();
  Fault(R"("type":"gone","verb":"watch")");
  Recorder as_event;
  auto w2 = client_->Watch(kConfigMaps, {.namespace_name = ns, .resource_version = "1"},
                           as_event.Handler());
  ASSERT_TRUE(w2.ok());
  EXPECT_TRUE(IsExpired(as_event.WaitClosed())) << as_event.WaitClosed();
  EXPECT_THAT(as_event.entries(), IsEmpty());
}

TEST_F(ClientTest, GoneInTheMiddleOfAWatchComesAfterTheEventsBeforeIt) {
  const std::string ns = Namespace(5);
  Fault(R"("type":"gone","verb":"watch","afterEvents":3)");
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  absl::Status s = rec.WaitClosed();
  EXPECT_TRUE(IsExpired(s)) << s;
  EXPECT_EQ(rec.entries().size(), 3u);
}

TEST_F(ClientTest, DroppedConnectionEndsTheWatchAsUnavailable) {
  const std::string ns = Namespace(1);
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  rec.WaitFor(1);
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults", R"({"type":"reset-connections"})").ok());
  absl::Status s = rec.WaitClosed();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  // The client reconnects for the next request.
  EXPECT_TRUE(client_->List(kConfigMaps, {.namespace_name = ns}).ok());
}

TEST_F(ClientTest, SlowDripStillDecodesWholeEvents) {
  const std::string ns = Namespace(3, 2000);
  Fault(R"("type":"slow","verb":"watch","bytesPerSecond":20000)");
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  EXPECT_THAT(rec.WaitFor(3), ElementsAre("ADDED seed-0000000", "ADDED seed-0000001",
                                          "ADDED seed-0000002"));
}

TEST_F(ClientTest, StalledWatchIsDetectedByTheIdleTimeout) {
  const std::string ns = Namespace(1);
  Fault(R"("type":"stall","verb":"watch","afterEvents":1)");
  Recorder rec;
  auto watch = client_->Watch(
      kConfigMaps, {.namespace_name = ns, .idle_timeout = absl::Milliseconds(300)}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  absl::Status s = rec.WaitClosed();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(rec.entries(), ElementsAre("ADDED seed-0000000"));
}

TEST_F(ClientTest, GarbageEndsTheWatchWithDataLoss) {
  const std::string ns = Namespace(2);
  Fault(R"("type":"garbage","verb":"watch","afterEvents":1)");
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  absl::Status s = rec.WaitClosed();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("event 2"));
  EXPECT_EQ(rec.entries().size(), 1u);
}

TEST_F(ClientTest, TruncatedWatchEndsWithAnError) {
  const std::string ns = Namespace(3);
  Fault(R"("type":"truncate","verb":"watch","afterEvents":2)");
  Recorder rec;
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  absl::Status s = rec.WaitClosed();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDataLoss(s)) << s;
  EXPECT_LE(rec.entries().size(), 2u);
}

TEST_F(ClientTest, DestroyingAWatchStopsItsCallbacks) {
  const std::string ns = Namespace(1);
  Recorder rec;
  Recorder witness;  // a second watch on the same objects, left open
  auto watch = client_->Watch(kConfigMaps, {.namespace_name = ns}, rec.Handler());
  ASSERT_TRUE(watch.ok());
  auto live = client_->Watch(kConfigMaps, {.namespace_name = ns}, witness.Handler());
  ASSERT_TRUE(live.ok());
  rec.WaitFor(1);
  witness.WaitFor(1);
  watch->reset();
  const std::vector<std::string> at_reset = rec.entries();
  // The server makes an event after the destruction, and the open watch receives it ...
  ASSERT_TRUE(client_->Create(kConfigMaps, ns, ConfigMap("after")).ok());
  ASSERT_THAT(witness.WaitFor(2), Contains("ADDED after"));
  // ... while the destroyed one ran no callback since: it has exactly what it had at reset.
  EXPECT_EQ(rec.entries(), at_reset);
}

TEST_F(ClientTest, UnauthorizedWithoutAValidToken) {
  RestConfig config = server_->config();
  config.bearer_token = "wrong";
  auto client = Client::Create({.config = config}).value();
  EXPECT_TRUE(IsUnauthorized(client->List(kConfigMaps, {}).status()));
}

// Credentials end to end, against a server with a known token.
class ClientAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = FakeApiServer::Start({.extra_flags = {"--token=the-right-token"}}).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static FakeApiServer* server_;
};
FakeApiServer* ClientAuthTest::server_ = nullptr;

TEST_F(ClientAuthTest, RotatedTokenFileIsReadAgainAfterA401) {
  const std::string dir = testing::MakeTempDir();
  RestConfig config = server_->config();
  config.bearer_token.clear();
  config.bearer_token_file = dir + "/token";
  testing::WriteFileOrDie(config.bearer_token_file, "the-right-token");
  auto client = Client::Create({.config = config}).value();
  ASSERT_TRUE(client->List(kNamespaces, {}).ok());
  testing::WriteFileOrDie(config.bearer_token_file, "an-expired-token");
  EXPECT_TRUE(IsUnauthorized(client->List(kNamespaces, {}).status()));
  testing::WriteFileOrDie(config.bearer_token_file, "the-right-token");
  EXPECT_TRUE(client->List(kNamespaces, {}).ok());
}

TEST_F(ClientAuthTest, ExecPluginRunsAgainWhenTheServerRejectsItsToken) {
  const std::string dir = testing::MakeTempDir();
  // First run: a token the server rejects; every later run: the right one.
  testing::WriteFileOrDie(dir + "/plugin", absl::StrCat(R"(#!/bin/sh
n=$(cat "$DIR/runs" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/runs"
token=the-right-token; [ $n -eq 1 ] && token=stale
printf '{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"%s"}}' $token
)"),
                          0755);
  RestConfig config = server_->config();
  config.bearer_token.clear();
  config.exec = ExecConfig{.command = dir + "/plugin",
                           .env = {{"DIR", dir}},
                           .api_version = "client.authentication.k8s.io/v1"};
  auto client = Client::Create({.config = config}).value();
  auto list = client->List(kNamespaces, {});  // 401 with the stale token, re-run, retried
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_GE(list->items.size(), 4u);
}

}  // namespace
}  // namespace informerd::client
