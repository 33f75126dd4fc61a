#include "client/kubeconfig.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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

constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n";
constexpr char kCert[] = "-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n";
constexpr char kKey[] = "-----BEGIN EC PRIVATE KEY-----\nkey\n-----END EC PRIVATE KEY-----\n";

std::string B64(absl::string_view s) { return absl::Base64Escape(s); }

absl::StatusOr<RestConfig> LoadOne(const std::string& dir, absl::string_view yaml,
                                   const std::string& context = "") {
  WriteFileOrDie(dir + "/config", yaml);
  return LoadKubeconfig({.paths = {dir + "/config"}, .context = context});
}

std::string ErrorOf(const absl::StatusOr<RestConfig>& c) {
  return c.ok() ? "(ok)" : std::string(c.status().message());
}

TEST(KubeconfigTest, ReadsEveryClusterAndUserField) {
  const std::string dir = MakeTempDir();
  WriteFileOrDie(dir + "/ca.crt", kCa);
  WriteFileOrDie(dir + "/token", " file-token \n");
  auto c = LoadOne(dir, absl::StrCat(R"(
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: ca.crt
    tls-server-name: kubernetes.default
    proxy-url: socks5://127.0.0.1:1080
    disable-compression: true
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
users:
- name: u1
  user:
    tokenFile: token
    client-certificate-data: )", B64(kCert), R"(
    client-key-data: )", B64(kKey), R"(
    as: admin
    as-groups: [ops, sre]
    as-uid: "42"
)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "https://10.0.0.1:6443");
  EXPECT_EQ(c->tls.ca_pem, kCa);
  EXPECT_EQ(c->tls.server_name, "kubernetes.default");
  EXPECT_FALSE(c->tls.insecure_skip_verify);
  EXPECT_EQ(c->proxy_url, "socks5://127.0.0.1:1080");
  EXPECT_TRUE(c->disable_compression);
  EXPECT_EQ(c->namespace_name, "team-a");
  EXPECT_EQ(c->bearer_token_file, dir + "/token");  // resolved against the file's directory
  EXPECT_EQ(c->tls.client_cert_pem, kCert);
  EXPECT_EQ(c->tls.client_key_pem, kKey);
  EXPECT_EQ(c->impersonate_user, "admin");
  EXPECT_THAT(c->impersonate_groups, ElementsAre("ops", "sre"));
  EXPECT_EQ(c->impersonate_uid, "42");
  EXPECT_THAT(c->source, HasSubstr("context \"dev\""));
}

TEST(KubeconfigTest, ReadsCertificateFilesAndDataAndPrefersData) {
  const std::string dir = MakeTempDir();
  WriteFileOrDie(dir + "/client.crt", kCert);
  WriteFileOrDie(dir + "/client.key", kKey);
  auto c = LoadOne(dir, absl::StrCat(R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://h:1", certificate-authority: /nonexistent/ca.crt,
            certificate-authority-data: )", B64("data-ca"), R"(}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {client-certificate: client.crt, client-key: client.key, token: t}}]
)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls.ca_pem, "data-ca");  // data wins; the missing file is not even read
  EXPECT_EQ(c->tls.client_cert_pem, kCert);
  EXPECT_EQ(c->tls.client_key_pem, kKey);
  EXPECT_EQ(c->bearer_token, "t");
  EXPECT_EQ(c->namespace_name, "default");
}

TEST(KubeconfigTest, ReadsExecPluginsAndBasicAuth) {
  const std::string dir = MakeTempDir();
  auto c = LoadOne(dir, R"(
current-context: a
clusters: [{name: c, cluster: {server: "https://h:1", insecure-skip-tls-verify: true}}]
contexts:
- {name: a, context: {cluster: c, user: plugin}}
- {name: b, context: {cluster: c, user: basic}}
users:
- name: plugin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/get-token
      args: [--cluster, prod]
      env: [{name: REGION, value: eu-1}]
      provideClusterInfo: true
      interactiveMode: Never
      installHint: install get-token
- name: basic
  user: {username: alice, password: s3cret}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls.insecure_skip_verify);
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->command, dir + "/bin/get-token");
  EXPECT_THAT(c->exec->args, ElementsAre("--cluster", "prod"));
  EXPECT_THAT(c->exec->env, ElementsAre(Pair("REGION", "eu-1")));
  EXPECT_EQ(c->exec->api_version, "client.authentication.k8s.io/v1");
  EXPECT_TRUE(c->exec->provide_cluster_info);
  EXPECT_EQ(c->exec->install_hint, "install get-token");
  auto b = LoadKubeconfig({.paths = {dir + "/config"}, .context = "b"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->username, "alice");
  EXPECT_EQ(b->password, "s3cret");
  EXPECT_FALSE(b->exec.has_value());
}

TEST(KubeconfigTest, KubeconfigListMergesWithTheFirstDefinitionWinning) {
  const std::string dir = MakeTempDir();
  WriteFileOrDie(dir + "/one", R"(
clusters: [{name: shared, cluster: {server: "https://first:1"}}]
users: [{name: u, user: {token: first-token}}]
)");
  WriteFileOrDie(dir + "/two", R"(
current-context: ctx
clusters:
- {name: shared, cluster: {server: "https://second:2"}}
- {name: only-two, cluster: {server: "https://two:2"}}
contexts:
- {name: ctx, context: {cluster: shared, user: u, namespace: n2}}
- {name: other, context: {cluster: only-two, user: u}}
users: [{name: u, user: {token: second-token}}]
)");
  WriteFileOrDie(dir + "/three", "current-context: other\n");
  const std::string list =
      absl::StrCat(dir, "/one:", dir, "/missing::", dir, "/two:", dir, "/three");
  auto c = LoadKubeconfig({.kubeconfig_env = list});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "https://first:1");   // first file to define "shared"
  EXPECT_EQ(c->bearer_token, "first-token");
  EXPECT_EQ(c->namespace_name, "n2");      // the context only the second file has
  auto other = LoadKubeconfig({.context = "other", .kubeconfig_env = list});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->host, "https://two:2");
}

TEST(KubeconfigTest, FindsTheDefaultFileUnderHome) {
  const std::string home = MakeTempDir();
  ASSERT_EQ(mkdir((home + "/.kube").c_str(), 0755), 0);
  WriteFileOrDie(home + "/.kube/config", R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://home:1"}}]
contexts: [{name: x, context: {cluster: c}}]
)");
  auto c = LoadKubeconfig({.kubeconfig_env = "", .home = home});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "https://home:1");
  EXPECT_TRUE(c->bearer_token.empty());  // no user: anonymous
}

TEST(KubeconfigTest, MissingFilesAreErrorsWhenNamedExplicitly) {
  const std::string dir = MakeTempDir();
  auto explicit_missing = LoadKubeconfig({.paths = {dir + "/nope"}});
  EXPECT_TRUE(absl::IsNotFound(explicit_missing.status()));
  EXPECT_THAT(ErrorOf(explicit_missing), HasSubstr(dir + "/nope"));
  auto none_exist = LoadKubeconfig({.kubeconfig_env = dir + "/a:" + dir + "/b"});
  EXPECT_TRUE(absl::IsNotFound(none_exist.status()));
  EXPECT_THAT(ErrorOf(none_exist), HasSubstr("none of the files in KUBECONFIG exist"));
  auto no_home = LoadKubeconfig({.kubeconfig_env = "", .home = dir});
  EXPECT_TRUE(absl::IsNotFound(no_home.status()));
  EXPECT_THAT(ErrorOf(no_home), HasSubstr(dir + "/.kube/config"));
}

TEST(KubeconfigTest, BadFieldsAreErrorsNamingTheField) {
  const std::string dir = MakeTempDir();
  const std::string head = R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
)";
  struct Case {
    std::string body;
    std::string error;
  };
  const Case cases[] = {
      {R"(clusters: [{name: c, cluster: {server: "https://h:1", certificate-authority: ca.crt}}]
users: [{name: u, user: {}}])",
       "clusters[\"c\"].cluster.certificate-authority: cannot read " + dir + "/ca.crt"},
      {R"(clusters: [{name: c, cluster: {certificate-authority-data: "!!notbase64"}}])",
       "clusters[\"c\"].cluster.certificate-authority-data: not valid base64"},
      {R"(clusters: [{name: c, cluster: {}}]
users: [{name: u, user: {}}])",
       "clusters[\"c\"].cluster.server: missing"},
      {R"(clusters: [{name: c, cluster: {server: "10.0.0.1:6443"}}])",
       "clusters[\"c\"].cluster.server: \"10.0.0.1:6443\" is not an http(s) URL"},
      {R"(clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: true,
  certificate-authority-data: Y2E=}}])",
       "insecure-skip-tls-verify: not allowed together with a certificate authority"},
      {R"(clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: maybe}}])",
       "clusters[\"c\"].cluster.insecure-skip-tls-verify: expected true or false"},
      {R"(clusters: [{name: other, cluster: {server: "https://h"}}])",
       "contexts[\"x\"].context.cluster: cluster \"c\" not found"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}])",
       "contexts[\"x\"].context.user: user \"u\" not found"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {client-certificate-data: Y2VydA==}}])",
       "users[\"u\"].user: client-certificate is set without client-key"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {client-key: missing.key}}])",
       "users[\"u\"].user.client-key: cannot read " + dir + "/missing.key"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {token: t, username: a, password: b}}])",
       "users[\"u\"].user: more than one authentication method (token, basic auth)"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {tokenFile: /nonexistent/token}}])",
       "users[\"u\"].user.tokenFile: cannot read /nonexistent/token"},
      {R"(clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {auth-provider: {name: gcp}}}])",
       "users[\"u\"].user.auth-provider: auth provider \"gcp\" is not supported"},
      {R"(users: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1alpha1}}}])",
       "users[\"u\"].user.exec.apiVersion: unsupported"},
      {R"(users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1}}}])",
       "users[\"u\"].user.exec.command: missing"},
      {R"(users: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1, env: [{value: v}]}}}])",
       "users[\"u\"].user.exec.env[0].name: missing"},
      {"clusters: {name: c}", "clusters: expected a list"},
      {"clusters: [{cluster: {}}]", "clusters[0].name: missing"},
      {"users: [{name: u, user: [1]}]", "users[\"u\"].user: expected a map"},
      {"clusters: [{name: c, cluster: {server: [a]}}]", "clusters[\"c\"].cluster.server: expected a string"},
      {"contexts: [x: [", "not valid YAML"},
  };
  for (const Case& c : cases) {
    auto loaded = LoadOne(dir, head + c.body);
    EXPECT_FALSE(loaded.ok()) << c.body;
    EXPECT_THAT(ErrorOf(loaded), HasSubstr(c.error)) << c.body;
    EXPECT_THAT(ErrorOf(loaded), HasSubstr("kubeconfig")) << c.body;
  }
  auto no_context = LoadOne(dir, "clusters: []\n");
  EXPECT_THAT(ErrorOf(no_context), HasSubstr("current-context is not set"));
  auto unknown_context = LoadOne(dir, head, "nope");
  EXPECT_THAT(ErrorOf(unknown_context), HasSubstr("context \"nope\" not found"));
}

TEST(KubeconfigTest, ParseKeepsWhereEachEntryCameFrom) {
  auto parsed = ParseKubeconfig("clusters: [{name: c, cluster: {server: https://h}}]\n", "/etc/k/a");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->clusters.count("c"), 1u);
  EXPECT_EQ(parsed->clusters.at("c").file, "/etc/k/a");
  EXPECT_TRUE(ParseKubeconfig("", "empty").ok());
  EXPECT_FALSE(ParseKubeconfig("- a\n- b\n", "list").ok());
}

}  // namespace
}  // namespace informerd::client
