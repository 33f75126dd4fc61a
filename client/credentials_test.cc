#include "client/credentials.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "client/read_file.h"
#include "client/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using testing::MakeTempDir;
using testing::WriteFileOrDie;

std::string Authorization(const Credentials::Auth& auth) {
  for (const auto& [k, v] : auth.headers) {
    if (k == "Authorization") return v;
  }
  return "";
}

TEST(CredentialsTest, StaticTokenAndImpersonationHeaders) {
  RestConfig config;
  config.bearer_token = "abc";
  config.impersonate_user = "jane";
  config.impersonate_groups = {"g1", "g2"};
  config.impersonate_uid = "7";
  auto creds = Credentials::Create(config, {}).value();
  auto auth = creds->Get();
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_THAT(auth->headers,
              ElementsAre(Pair("Authorization", "Bearer abc"), Pair("Impersonate-User", "jane"),
                          Pair("Impersonate-Group", "g1"), Pair("Impersonate-Group", "g2"),
                          Pair("Impersonate-Uid", "7")));
  EXPECT_EQ(creds->Get()->generation, auth->generation);
}

TEST(CredentialsTest, BasicAuth) {
  RestConfig config;
  config.username = "alice";
  config.password = "pw";
  auto auth = Credentials::Create(config, {}).value()->Get();
  ASSERT_TRUE(auth.ok());
  EXPECT_EQ(Authorization(*auth), "Basic " + absl::Base64Escape("alice:pw"));
}

TEST(CredentialsTest, AnonymousHasNoHeaders) {
  auto auth = Credentials::Create(RestConfig(), {}).value()->Get();
  ASSERT_TRUE(auth.ok());
  EXPECT_TRUE(auth->headers.empty());
}

TEST(CredentialsTest, TokenFileIsReadAgainWhenItChanges) {
  const std::string dir = MakeTempDir();
  RestConfig config;
  config.bearer_token_file = dir + "/token";
  WriteFileOrDie(config.bearer_token_file, "first\n");
  auto creds = Credentials::Create(config, {}).value();
  auto a1 = creds->Get();
  ASSERT_TRUE(a1.ok()) << a1.status();
  EXPECT_EQ(Authorization(*a1), "Bearer first");
  EXPECT_EQ(creds->Get()->generation, a1->generation);  // unchanged file: same credential
  WriteFileOrDie(config.bearer_token_file, "second");  // rotated, as the kubelet does
  auto a2 = creds->Get();
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(Authorization(*a2), "Bearer second");
  EXPECT_GT(a2->generation, a1->generation);
  // A 401 forces a re-read even if the file looks the same.
  creds->Invalidate(a2->generation);
  auto a3 = creds->Get();
  ASSERT_TRUE(a3.ok());
  EXPECT_GT(a3->generation, a2->generation);
  // A missing file is an Unauthenticated error naming it.
  ASSERT_EQ(unlink(config.bearer_token_file.c_str()), 0);
  auto gone = creds->Get();
  EXPECT_TRUE(absl::IsUnauthenticated(gone.status()));
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr(config.bearer_token_file));
}

// A plugin that counts its runs in $DIR/runs, saves KUBERNETES_EXEC_INFO in $DIR/info, and
// prints `status_json` (in which $n is the run number) as its ExecCredential status.
RestConfig PluginConfig(const std::string& dir, const std::string& status_json) {
  WriteFileOrDie(dir + "/plugin", absl::StrCat(R"(#!/bin/sh
n=$(cat "$DIR/runs" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$DIR/info"
cat <<END
{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":)",
                                               status_json, R"(}
END
)"),
                 0755);
  RestConfig config;
  config.host = "https://10.0.0.1:6443";
  config.tls.ca_pem = "CA";
  config.exec = ExecConfig{.command = dir + "/plugin",
                           .args = {"--flag"},
                           .env = {{"DIR", dir}},
                           .api_version = "client.authentication.k8s.io/v1",
                           .provide_cluster_info = true};
  return config;
}

TEST(CredentialsTest, ExecPluginTokenIsCachedUntilItExpires) {
  const std::string dir = MakeTempDir();
  FakeClock clock(absl::FromUnixSeconds(1767225600));  // 2026-01-01T00:00:00Z
  RestConfig config = PluginConfig(
      dir, R"({"token":"tok-$n","expirationTimestamp":"2026-01-01T01:00:00Z"})");
  auto creds = Credentials::Create(config, {.clock = &clock}).value();
  auto a1 = creds->Get();
  ASSERT_TRUE(a1.ok()) << a1.status();
  EXPECT_EQ(Authorization(*a1), "Bearer tok-1");
  clock.Advance(absl::Minutes(59));
  EXPECT_EQ(Authorization(*creds->Get()), "Bearer tok-1");
  EXPECT_EQ(creds->exec_runs(), 1);
  clock.Advance(absl::Minutes(1));  // expired
  auto a2 = creds->Get();
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(Authorization(*a2), "Bearer tok-2");
  EXPECT_EQ(creds->exec_runs(), 2);
  // The plugin was told what is asked for, and about the cluster.
  std::string info = ReadFile(dir + "/info").value();
  EXPECT_THAT(info, HasSubstr(R"("apiVersion":"client.authentication.k8s.io/v1")"));
  EXPECT_THAT(info, HasSubstr(R"("interactive":false)"));
  EXPECT_THAT(info, HasSubstr(R"("server":"https://10.0.0.1:6443")"));
  EXPECT_THAT(info, HasSubstr(absl::StrCat(R"("certificate-authority-data":")",
                                           absl::Base64Escape("CA"))));
}

TEST(CredentialsTest, ExecPluginRunsAgainAfterA401) {
  const std::string dir = MakeTempDir();
  RestConfig config = PluginConfig(dir, R"({"token":"tok-$n"})");  // never expires
  auto creds = Credentials::Create(config, {}).value();
  auto a1 = creds->Get().value();
  EXPECT_EQ(Authorization(creds->Get().value()), "Bearer tok-1");
  creds->Invalidate(a1.generation);
  auto a2 = creds->Get().value();
  EXPECT_EQ(Authorization(a2), "Bearer tok-2");
  creds->Invalidate(a1.generation);  // stale: a2 already replaced a1
  EXPECT_EQ(Authorization(creds->Get().value()), "Bearer tok-2");
  EXPECT_EQ(creds->exec_runs(), 2);
}

TEST(CredentialsTest, ExecPluginMayReturnAClientCertificate) {
  const std::string dir = MakeTempDir();
  RestConfig config =
      PluginConfig(dir, R"({"clientCertificateData":"CERT","clientKeyData":"KEY"})");
  auto auth = Credentials::Create(config, {}).value()->Get();
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->client_cert_pem, "CERT");
  EXPECT_EQ(auth->client_key_pem, "KEY");
  EXPECT_EQ(Authorization(*auth), "");
}

TEST(CredentialsTest, ExecPluginFailuresAreClearErrors) {
  const std::string dir = MakeTempDir();
  struct Case {
    std::string script;
    std::string error;
  };
  const Case cases[] = {
      {"#!/bin/sh\necho 'token expired, run login' >&2\nexit 3\n",
       "exited with status 3: token expired, run login"},
      {"#!/bin/sh\necho 'not json'\n", "output is not a valid ExecCredential"},
      {"#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":\"v9\",\"status\":{\"token\":\"t\"}}'\n",
       "apiVersion is \"v9\""},
      {"#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":\"client.authentication.k8s.io/v1\"}'\n",
       "status is missing"},
      {"#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"tomorrow\"}}'\n",
       "status.expirationTimestamp \"tomorrow\""},
  };
  int i = 0;
  for (const Case& c : cases) {
    // A new path per script: exec of a file just rewritten by rename is fine, but keep it simple.
    const std::string path = absl::StrCat(dir, "/bad", i++);
    WriteFileOrDie(path, c.script, 0755);
    RestConfig config;
    config.exec = ExecConfig{.command = path, .api_version = "client.authentication.k8s.io/v1"};
    auto auth = Credentials::Create(config, {}).value()->Get();
    EXPECT_TRUE(absl::IsUnauthenticated(auth.status())) << c.script << auth.status();
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr(c.error)) << c.script;
  }
  RestConfig missing;
  missing.exec = ExecConfig{.command = "informerd-no-such-plugin",
                            .api_version = "client.authentication.k8s.io/v1",
                            .install_hint = "install it with: apt install plugin"};
  auto auth = Credentials::Create(missing, {}).value()->Get();
  EXPECT_FALSE(auth.ok());
  EXPECT_THAT(std::string(auth.status().message()), HasSubstr("install it with"));
}

TEST(CredentialsTest, HungExecPluginIsKilledAtTheTimeout) {
  const std::string dir = MakeTempDir();
  // The plugin says its pid (which `exec` keeps), then hangs far longer than the timeout.
  WriteFileOrDie(dir + "/hang",
                 absl::StrCat("#!/bin/sh\necho $$ > ", dir, "/pid.tmp && mv ", dir, "/pid.tmp ",
                              dir, "/pid\nexec sleep 300\n"),
                 0755);
  RestConfig config;
  config.exec = ExecConfig{.command = dir + "/hang",
                           .api_version = "client.authentication.k8s.io/v1"};
  // Long enough for a shell to start on a loaded machine, short against the plugin's 300 s.
  const absl::Duration timeout = absl::Seconds(2);
  auto creds = Credentials::Create(config, {.exec_timeout = timeout}).value();
  const absl::Time start = absl::Now();
  auto auth = creds->Get();
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(auth.status())) << auth.status();
  // Get gave up at the timeout (not before, and not after waiting for the plugin to end) ...
  EXPECT_GE(took, timeout);
  EXPECT_LT(took, timeout + absl::Seconds(20));
  // ... and the plugin is gone: killed and reaped by the time Get returned.
  absl::StatusOr<std::string> pid_text = ReadFile(dir + "/pid");
  ASSERT_TRUE(pid_text.ok()) << "the plugin did not start within " << timeout << ": "
                             << pid_text.status();
  pid_t pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(*pid_text), &pid)) << *pid_text;
  errno = 0;
  EXPECT_EQ(kill(pid, 0), -1) << "plugin process " << pid << " still exists";
  EXPECT_EQ(errno, ESRCH);
}

TEST(CredentialsTest, InteractiveOnlyPluginsAreRefused) {
  RestConfig config;
  config.exec = ExecConfig{.command = "x", .api_version = "client.authentication.k8s.io/v1",
                           .interactive_mode = "Always"};
  EXPECT_TRUE(absl::IsFailedPrecondition(Credentials::Create(config, {}).status()));
}

}  // namespace
}  // namespace informerd::client
