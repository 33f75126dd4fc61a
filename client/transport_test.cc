#include "client/transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "client/api_error.h"
#include "client/fake_apiserver.h"
#include "client/read_file.h"
#include "client/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;

template <typename Pred>
void SpinUntil(Pred pred) {
  while (!pred()) std::this_thread::yield();
}

// The outcome of one request, filled in by its callbacks.
struct Result {
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  int code ABSL_GUARDED_BY(mu) = 0;
  std::string body ABSL_GUARDED_BY(mu);
  int chunks ABSL_GUARDED_BY(mu) = 0;

  HttpCallbacks Callbacks() {
    return {.on_headers = [this](int c, const auto&) {
              MutexLock l(&mu);
              code = c;
            },
            .on_data = [this](absl::string_view chunk) {
              MutexLock l(&mu);
              body.append(chunk.data(), chunk.size());
              ++chunks;
              return true;
            },
            .on_done = [this](absl::Status s) {
              MutexLock l(&mu);
              status = s;
              done = true;
            }};
  }
  absl::Status Wait() {
    MutexLock l(&mu);
    mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done; });
    return status;
  }
  bool Done() {
    MutexLock l(&mu);
    return done;
  }
  std::string Body() {
    MutexLock l(&mu);
    return body;
  }
  int Chunks() {
    MutexLock l(&mu);
    return chunks;
  }
};

std::vector<std::pair<std::string, std::string>> AuthHeaders(const RestConfig& config) {
  return {{"Authorization", "Bearer " + config.bearer_token}};
}

Transport::Options OptionsFor(const RestConfig& config) {
  return Transport::Options{.host = config.host, .tls = config.tls};
}

class TransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = FakeApiServer::Start({}).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void TearDown() override { server_->Control("DELETE", "/_fake/faults").IgnoreError(); }

  HttpRequest Get(std::string path) {
    return HttpRequest{.path = std::move(path), .headers = AuthHeaders(server_->config())};
  }

  static FakeApiServer* server_;
};
FakeApiServer* TransportTest::server_ = nullptr;

TEST_F(TransportTest, GetVerifiesTheServerAgainstTheCa) {
  auto t = Transport::Create(OptionsFor(server_->config())).value();
  Result r;
  t->Start(Get("/api/v1/namespaces/default/configmaps"), r.Callbacks());
  ASSERT_TRUE(r.Wait().ok()) << r.Wait();
  EXPECT_THAT(r.Body(), HasSubstr("\"kind\":\"ConfigMapList\""));
  EXPECT_EQ(t->active_requests(), 0);
}

TEST_F(TransportTest, WrongCaFailsVerification) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_EQ(std::system(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                                     "-nodes -subj /CN=other-ca -days 1 -keyout ", dir,
                                     "/k.pem -out ", dir, "/ca.pem 2>/dev/null")
                            .c_str()),
            0);
  Transport::Options options = OptionsFor(server_->config());
  options.tls.ca_pem = ReadFile(dir + "/ca.pem").value();
  auto t = Transport::Create(options).value();
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  absl::Status s = r.Wait();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("certificate"));
}

TEST_F(TransportTest, TlsServerNameIsWhatTheCertificateIsCheckedAgainst) {
  Transport::Options good = OptionsFor(server_->config());
  good.tls.server_name = "kubernetes.default";  // a SAN of the fake server's certificate
  auto t = Transport::Create(good).value();
  Result ok;
  t->Start(Get("/api/v1/namespaces"), ok.Callbacks());
  EXPECT_TRUE(ok.Wait().ok()) << ok.Wait();

  Transport::Options bad = OptionsFor(server_->config());
  bad.tls.server_name = "not-the-server.example";
  auto t2 = Transport::Create(bad).value();
  Result fail;
  t2->Start(Get("/api/v1/namespaces"), fail.Callbacks());
  EXPECT_TRUE(absl::IsFailedPrecondition(fail.Wait())) << fail.Wait();
}

TEST_F(TransportTest, InsecureSkipVerifyNeedsNoCa) {
  Transport::Options options = OptionsFor(server_->config());
  options.tls.ca_pem.clear();
  options.tls.insecure_skip_verify = true;
  auto t = Transport::Create(options).value();
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  EXPECT_TRUE(r.Wait().ok()) << r.Wait();
}

TEST_F(TransportTest, HttpErrorsArriveAsApiErrors) {
  auto t = Transport::Create(OptionsFor(server_->config())).value();
  Result missing;
  t->Start(Get("/api/v1/namespaces/default/configmaps/no-such-thing"), missing.Callbacks());
  absl::Status s = missing.Wait();
  EXPECT_TRUE(client::IsNotFound(s)) << s;
  EXPECT_EQ(missing.Chunks(), 0);  // error bodies never reach on_data
  Result anonymous;
  t->Start(HttpRequest{.path = "/api/v1/namespaces"}, anonymous.Callbacks());
  EXPECT_TRUE(IsUnauthorized(anonymous.Wait())) << anonymous.Wait();
}

TEST_F(TransportTest, SendsTheUserAgent) {
  Transport::Options options = OptionsFor(server_->config());
  options.user_agent = "informerd-ua-test/1";
  auto t = Transport::Create(options).value();
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults",
                               R"({"type":"internal-error","userAgent":"informerd-ua-test"})")
                  .ok());
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  EXPECT_TRUE(IsInternalError(r.Wait())) << r.Wait();
}

TEST_F(TransportTest, TooManyRequestsIsRetriedAfterRetryAfter) {
  FakeClock clock;
  Transport::Options options = OptionsFor(server_->config());
  options.clock = &clock;
  options.user_agent = "retry-test";
  auto t = Transport::Create(options).value();
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults",
                               R"({"type":"too-many-requests","userAgent":"retry-test","count":2,"retryAfterSeconds":3})")
                  .ok());
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  for (int i = 0; i < 2; ++i) {
    SpinUntil([&] { return clock.NextDeadline() != absl::InfiniteFuture(); });
    EXPECT_EQ(clock.NextDeadline(), clock.Now() + absl::Seconds(3));
    EXPECT_FALSE(r.Done());
    clock.Advance(absl::Seconds(3));
  }
  EXPECT_TRUE(r.Wait().ok()) << r.Wait();
}

TEST_F(TransportTest, TooManyRequestsBeyondTheRetriesIsAnError) {
  Transport::Options options = OptionsFor(server_->config());
  options.max_retries = 0;
  options.user_agent = "no-retry-test";
  auto t = Transport::Create(options).value();
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults",
                               R"({"type":"too-many-requests","userAgent":"no-retry-test","retryAfterSeconds":7})")
                  .ok());
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  absl::Status s = r.Wait();
  EXPECT_TRUE(IsTooManyRequests(s)) << s;
  EXPECT_EQ(RetryAfter(s), absl::Seconds(7));
}

TEST_F(TransportTest, RateLimiterAdmitsBurstThenQps) {
  FakeClock clock;
  Transport::Options options = OptionsFor(server_->config());
  options.clock = &clock;
  options.qps = 2;
  options.burst = 3;
  auto t = Transport::Create(options).value();
  Result r[5];
  for (Result& x : r) t->Start(Get("/api/v1/namespaces"), x.Callbacks());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r[i].Wait().ok());
  SpinUntil([&] { return clock.NextDeadline() != absl::InfiniteFuture(); });
  EXPECT_FALSE(r[3].Done());
  EXPECT_EQ(clock.NextDeadline(), clock.Now() + absl::Milliseconds(500));
  clock.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(r[3].Wait().ok());
  EXPECT_FALSE(r[4].Done());
  clock.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(r[4].Wait().ok());
}

TEST_F(TransportTest, IdleTimeoutDetectsAStalledWatch) {
  FakeClock clock;
  Transport::Options options = OptionsFor(server_->config());
  options.clock = &clock;
  options.user_agent = "stall-test";
  auto t = Transport::Create(options).value();
  ASSERT_TRUE(server_->Control("POST", "/_fake/seed",
                               R"({"resource":"configmaps","namespace":"stall","count":2})")
                  .ok());
  ASSERT_TRUE(server_->Control("POST", "/_fake/faults",
                               R"({"type":"stall","userAgent":"stall-test","afterEvents":2})")
                  .ok());
  Result r;
  HttpRequest watch = Get("/api/v1/namespaces/stall/configmaps?watch=true");
  watch.idle_timeout = absl::Seconds(30);
  t->Start(watch, r.Callbacks());
  SpinUntil([&] { return r.Body().find("seed-0000001") != std::string::npos; });
  clock.Advance(absl::Seconds(29));
  EXPECT_FALSE(r.Done());
  clock.Advance(absl::Seconds(1));
  absl::Status s = r.Wait();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("stalled"));
}

TEST_F(TransportTest, CancelStopsCallbacksAtOnce) {
  auto t = Transport::Create(OptionsFor(server_->config())).value();
  Result r;
  uint64_t id = t->Start(Get("/api/v1/namespaces/default/configmaps?watch=true"), r.Callbacks());
  SpinUntil([&] { return t->active_requests() == 1; });
  t->Cancel(id);
  SpinUntil([&] { return t->active_requests() == 0; });
  EXPECT_FALSE(r.Done());
  t->Cancel(id);  // again: ignored
}

TEST_F(TransportTest, ReaderCanEndAStream) {
  auto t = Transport::Create(OptionsFor(server_->config())).value();
  Result r;
  HttpCallbacks cb = r.Callbacks();
  cb.on_data = [](absl::string_view) { return false; };
  ASSERT_TRUE(server_->Control("POST", "/_fake/seed",
                               R"({"resource":"configmaps","namespace":"reader","count":1})")
                  .ok());
  t->Start(Get("/api/v1/namespaces/reader/configmaps?watch=true"), cb);
  EXPECT_TRUE(absl::IsAborted(r.Wait())) << r.Wait();
}

TEST_F(TransportTest, WatchesShareConnectionsUpToOneHundredStreams) {
  Transport::Options options = OptionsFor(server_->config());
  options.qps = 0;  // all at once: this is about multiplexing, not the limiter
  auto t = Transport::Create(options).value();
  std::vector<std::unique_ptr<Result>> results;
  std::vector<uint64_t> ids;
  auto start_watches = [&](int n) {
    for (int i = 0; i < n; ++i) {
      results.push_back(std::make_unique<Result>());
      ids.push_back(t->Start(Get("/api/v1/namespaces/default/configmaps?watch=true"),
                             results.back()->Callbacks()));
    }
    SpinUntil([&] {
      for (auto& r : results) {
        MutexLock l(&r->mu);
        if (r->code != 200) return false;
      }
      return true;
    });
  };
  start_watches(100);  // kube-apiserver's (and the fake's) limit of streams per connection
  EXPECT_EQ(t->connections_opened(), 1);
  start_watches(50);
  EXPECT_EQ(t->connections_opened(), 2);
  // The fake counts a watch a moment after its response headers go out: wait for the count (the
  // watches of earlier tests in this suite may also take a moment to close).
  absl::StatusOr<std::string> stats;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    stats = server_->Control("GET", "/_fake/stats");
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (absl::StrContains(*stats, "\"watchesOpen\":150")) break;
    absl::SleepFor(absl::Milliseconds(10));
  } while (absl::Now() < deadline);
  EXPECT_THAT(*stats, HasSubstr("\"watchesOpen\":150"));
  for (uint64_t id : ids) t->Cancel(id);
}

TEST_F(TransportTest, ConnectionRefusedIsUnavailable) {
  Transport::Options options = OptionsFor(server_->config());
  options.host = "https://127.0.0.1:1";
  auto t = Transport::Create(options).value();
  Result r;
  t->Start(Get("/api/v1/namespaces"), r.Callbacks());
  EXPECT_TRUE(absl::IsUnavailable(r.Wait())) << r.Wait();
}

// A TLS server that requires a client certificate signed by its CA: `openssl s_server -www`
// on port 0, answering every request with a status page.
class ClientCertServer {
 public:
  ClientCertServer() {
    dir_ = testing::MakeTempDir();
    const std::string d = dir_;
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "; ",
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=ca -days 1 "
        "-keyout ca.key -out ca.pem; ",
        "printf 'subjectAltName=IP:127.0.0.1\n' > san; ",
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=server "
        "-keyout server.key -out server.csr; ",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "-extfile san -out server.pem; ",
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=informerd "
        "-keyout client.key -out client.csr; ",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "-out client.pem");
    testing::WriteFileOrDie(d + "/gen.sh", script);
    if (std::system(absl::StrCat("/bin/sh ", d, "/gen.sh >/dev/null 2>&1").c_str()) != 0) return;
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      execlp("openssl", "openssl", "s_server", "-accept", "127.0.0.1:0", "-www", "-cert",
             (d + "/server.pem").c_str(), "-key", (d + "/server.key").c_str(), "-CAfile",
             (d + "/ca.pem").c_str(), "-Verify", "1", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    // Blocking reads until it says where it listens ("ACCEPT 127.0.0.1:PORT").
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (absl::StartsWith(line, "ACCEPT ")) {
        port_ = line.substr(line.rfind(':') + 1);
        break;
      }
      line.clear();
    }
    out_fd_ = out[0];
  }
  ~ClientCertServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }
  bool ok() const { return !port_.empty(); }
  std::string url() const { return "https://127.0.0.1:" + port_; }
  std::string file(const std::string& name) const { return ReadFile(dir_ + "/" + name).value(); }

 private:
  std::string dir_;
  std::string port_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
};

TEST(TransportTlsTest, ClientCertificateAuthenticates) {
  ClientCertServer server;
  ASSERT_TRUE(server.ok());
  Transport::Options options{.host = server.url()};
  options.tls.ca_pem = server.file("ca.pem");
  {
    auto anonymous = Transport::Create(options).value();
    Result r;
    anonymous->Start(HttpRequest{.path = "/"}, r.Callbacks());
    EXPECT_FALSE(r.Wait().ok());  // the server requires a certificate
  }
  options.tls.client_cert_pem = server.file("client.pem");
  options.tls.client_key_pem = server.file("client.key");
  auto with_cert = Transport::Create(options).value();
  Result r;
  with_cert->Start(HttpRequest{.path = "/"}, r.Callbacks());
  EXPECT_TRUE(r.Wait().ok()) << r.Wait();
  EXPECT_THAT(r.Body(), HasSubstr("CN=informerd"));  // s_server shows the peer's certificate
  // A per-request certificate (as an exec plugin returns) works the same.
  Transport::Options no_default = options;
  no_default.tls.client_cert_pem.clear();
  no_default.tls.client_key_pem.clear();
  auto per_request = Transport::Create(no_default).value();
  Result r2;
  per_request->Start(HttpRequest{.path = "/",
                                 .client_cert_pem = server.file("client.pem"),
                                 .client_key_pem = server.file("client.key")},
                     r2.Callbacks());
  EXPECT_TRUE(r2.Wait().ok()) << r2.Wait();
}

}  // namespace
}  // namespace informerd::client
