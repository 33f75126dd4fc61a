#include "server/informer/apiserver_fixture.h"

#include <algorithm>
#include <cstdlib>
#include <vector>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "server/informer/client_lister_watcher.h"

namespace informerd::informer::testing {
namespace {

const client::GroupVersionResource kConfigMaps{"", "v1", "configmaps"};

std::unique_ptr<client::Client> NewClient(const std::string& user_agent) {
  return client::Client::Create({.config = ApiServerFixture::Server()->config(),
                                 .user_agent = user_agent,
                                 .qps = 0})
      .value();
}

}  // namespace

client::testing::FakeApiServer* ApiServerFixture::Server() {
  static client::testing::FakeApiServer* server = [] {
    auto started = client::testing::FakeApiServer::Start({.extra_flags = {"--bookmark-interval=500ms"}});
    if (!started.ok()) {
      std::fprintf(stderr, "cannot start the fake API server: %s\n",
                   started.status().ToString().c_str());
      std::abort();
    }
    return started->release();
  }();
  return server;
}

ApiServerFixture::ApiServerFixture(std::string name)
    : ns_(std::move(name)),
      user_agent_(absl::StrCat("informerd-informer-", ns_)),
      informer_client_(NewClient(user_agent_)),
      verify_client_(NewClient(absl::StrCat("verify-", ns_))) {}

ApiServerFixture::~ApiServerFixture() {
  Server()->Control("DELETE", absl::StrCat("/_fake/faults?userAgent=", user_agent_)).IgnoreError();
}

absl::Status ApiServerFixture::Seed(int count, int bytes) {
  std::string body = absl::StrCat(R"({"resource":"configmaps","namespace":")", ns_,
                                  R"(","count":)", count);
  if (bytes > 0) absl::StrAppend(&body, R"(,"bytes":)", bytes);
  absl::StrAppend(&body, "}");
  return Server()->Control("POST", "/_fake/seed", body).status();
}

absl::Status ApiServerFixture::Fault(absl::string_view fields) {
  return Server()
      ->Control("POST", "/_fake/faults",
                absl::StrCat("{", fields, R"(,"resource":"configmaps","userAgent":")", user_agent_,
                             "\"}"))
      .status();
}

absl::Status ApiServerFixture::Immediate(absl::string_view json) {
  return Server()->Control("POST", "/_fake/faults", json).status();
}

std::unique_ptr<SharedInformer> ApiServerFixture::NewInformer(SharedInformerOptions options) {
  options.name = absl::StrCat("configmaps@", ns_, options.name.empty() ? "" : "/", options.name);
  options.lister_watcher = ClientListerWatcher::Create({.client = informer_client_.get(),
                                                        .resource = kConfigMaps,
                                                        .namespace_name = ns_})
                               .value();
  options.expected_kind = "ConfigMap";
  if (options.backoff.initial == BackoffOptions().initial) {
    options.backoff.initial = absl::Milliseconds(20);
    options.backoff.max = absl::Milliseconds(400);
  }
  if (options.stall_timeout == SharedInformerOptions().stall_timeout) {
    options.stall_timeout = absl::Seconds(3);
  }
  if (options.seed == 0) options.seed = 11;
  return SharedInformer::Create(std::move(options)).value();
}

absl::Status ApiServerFixture::Create(const std::string& name) {
  ++changes_;
  return verify_client_
      ->Create(kConfigMaps, ns_,
               absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", name,
                            R"("},"data":{"v":"0"}})"))
      .status();
}

absl::Status ApiServerFixture::Update(const std::string& name) {
  const int n = ++changes_;
  return verify_client_
      ->Patch(kConfigMaps, ns_, name, client::PatchType::kMerge,
              absl::StrCat(R"({"data":{"v":")", n, R"("}})"))
      .status();
}

absl::Status ApiServerFixture::Delete(const std::string& name) {
  ++changes_;
  return verify_client_->Delete(kConfigMaps, ns_, name);
}

absl::StatusOr<State> ListState(client::Client& client, const client::GroupVersionResource& resource,
                                const std::string& namespace_name) {
  client::ListOptions options;
  options.namespace_name = namespace_name;
  absl::StatusOr<client::ListResult> list = client.List(resource, options);
  if (!list.ok()) return list.status();
  State state;
  for (const auto& object : list->items) {
    state[std::string(object->key())] = {std::string(object->uid()),
                                         std::string(object->resource_version())};
  }
  return state;
}

absl::StatusOr<State> ApiServerFixture::ServerState() {
  return ListState(*verify_client_, kConfigMaps, ns_);
}

State CacheState(const SharedInformer& informer) {
  State state;
  for (const ObjectPtr& object : informer.store().List().objects) {
    state[std::string(object->key())] = {std::string(object->uid()),
                                         std::string(object->resource_version())};
  }
  return state;
}

std::string DescribeDifference(const State& want, const State& got) {
  for (const auto& [key, s] : want) {
    auto it = got.find(key);
    if (it == got.end()) return absl::StrCat(key, " missing from the cache");
    if (!(it->second == s)) {
      return absl::StrCat(key, ": cache has uid ", it->second.uid, " rv ",
                          it->second.resource_version, ", server has uid ", s.uid, " rv ",
                          s.resource_version);
    }
  }
  for (const auto& [key, s] : got) {
    if (!want.contains(key)) return absl::StrCat(key, " is in the cache but not on the server");
  }
  return "";
}

absl::Status ApiServerFixture::WaitConverged(SharedInformer& informer, absl::Duration timeout) {
  return testing::WaitConverged(
      informer, [this] { return ServerState(); }, timeout);
}

absl::Status WaitConverged(SharedInformer& informer,
                           const std::function<absl::StatusOr<State>()>& server_state,
                           absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // A listener of our own tells us when the cache changes: only then can a comparison that
  // failed succeed (the server changes only through this fixture).
  Mutex mu;
  CondVar cv;
  bool changed = false;
  auto listener = informer.AddListener({.name = "converged-check",
                                        .buffer_size = size_t{1} << 20,
                                        .on_ready =
                                            [&] {
                                              MutexLock lock(&mu);
                                              changed = true;
                                              cv.Signal();
                                            }})
                      .value();
  std::string difference = "never compared";
  absl::Status result = absl::OkStatus();
  std::vector<Notification> drained;
  for (;;) {
    // Drain until empty, so that the next change calls on_ready.
    do {
      drained.clear();
      listener->Pop(size_t{1} << 20, &drained, /*wait=*/false);
      listener->Done(drained);
    } while (!drained.empty());
    absl::StatusOr<State> server = server_state();
    absl::Time wait_until = deadline;
    if (server.ok()) {
      difference = DescribeDifference(*server, CacheState(informer));
      if (difference.empty()) break;
    } else {
      // The server refuses connections for a while: ask again soon.
      difference = absl::StrCat("server state unavailable: ", server.status().ToString());
      wait_until = std::min(deadline, absl::Now() + absl::Milliseconds(100));
    }
    MutexLock lock(&mu);
    while (!changed && absl::Now() < wait_until) cv.WaitWithDeadline(&mu, wait_until);
    changed = false;
    if (absl::Now() >= deadline) {
      const ReflectorStatus status = informer.reflector_status();
      result = absl::DeadlineExceededError(
          absl::StrCat("not converged: ", difference, "; reflector ",
                       ReflectorStateName(status.state), ", last error ",
                       status.last_error.ToString()));
      break;
    }
  }
  informer.RemoveEventHandler(listener).IgnoreError();
  return result;
}

}  // namespace informerd::informer::testing
