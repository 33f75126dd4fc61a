#include "client/in_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "client/credentials.h"
#include "client/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::HasSubstr;
using testing::MakeTempDir;
using testing::WriteFileOrDie;

std::string ServiceAccountDir(bool with_namespace = true) {
  std::string dir = MakeTempDir();
  WriteFileOrDie(dir + "/token", "sa-token\n");
  WriteFileOrDie(dir + "/ca.crt", "-----BEGIN CERTIFICATE-----\n");
  if (with_namespace) WriteFileOrDie(dir + "/namespace", "kube-system");
  return dir;
}

TEST(InClusterTest, ReadsTokenCaAndNamespaceFromTheServiceAccountDirectory) {
  const std::string dir = ServiceAccountDir();
  auto c = LoadInClusterConfig(
      {.service_account_dir = dir, .service_host = "10.96.0.1", .service_port = "443"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "https://10.96.0.1:443");
  EXPECT_EQ(c->bearer_token_file, dir + "/token");  // re-read on rotation by Credentials
  EXPECT_TRUE(c->bearer_token.empty());
  EXPECT_EQ(c->tls.ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(c->namespace_name, "kube-system");
  EXPECT_EQ(c->source, "in-cluster");
}

TEST(InClusterTest, BracketsIpv6HostsAndDefaultsTheNamespace) {
  const std::string dir = ServiceAccountDir(/*with_namespace=*/false);
  auto c = LoadInClusterConfig(
      {.service_account_dir = dir, .service_host = "fd00::1", .service_port = "6443"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "https://[fd00::1]:6443");
  EXPECT_EQ(c->namespace_name, "default");
}

TEST(InClusterTest, OutsideAClusterIsAFailedPrecondition) {
  auto c = LoadInClusterConfig({.service_host = "", .service_port = ""});
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status()));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("KUBERNETES_SERVICE_HOST"));
}

TEST(InClusterTest, MissingFilesAreErrorsNamingThem) {
  const std::string empty = MakeTempDir();
  auto no_token = LoadInClusterConfig(
      {.service_account_dir = empty, .service_host = "h", .service_port = "1"});
  EXPECT_TRUE(absl::IsNotFound(no_token.status()));
  EXPECT_THAT(std::string(no_token.status().message()), HasSubstr(empty + "/token"));
  WriteFileOrDie(empty + "/token", "t");
  auto no_ca = LoadInClusterConfig(
      {.service_account_dir = empty, .service_host = "h", .service_port = "1"});
  EXPECT_TRUE(absl::IsNotFound(no_ca.status()));
  EXPECT_THAT(std::string(no_ca.status().message()), HasSubstr(empty + "/ca.crt"));
  WriteFileOrDie(empty + "/token", "  \n");
  auto blank = LoadInClusterConfig(
      {.service_account_dir = empty, .service_host = "h", .service_port = "1"});
  EXPECT_THAT(std::string(blank.status().message()), HasSubstr("is empty"));
}

TEST(InClusterTest, RotatedServiceAccountTokenIsPickedUp) {
  // The kubelet's layout: token -> ..data/token, ..data -> ..<timestamp>, swapped atomically.
  const std::string dir = MakeTempDir();
  ASSERT_EQ(mkdir((dir + "/..v1").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/..v2").c_str(), 0755), 0);
  WriteFileOrDie(dir + "/..v1/token", "token-one");
  WriteFileOrDie(dir + "/..v2/token", "token-two");
  ASSERT_EQ(symlink("..v1", (dir + "/..data").c_str()), 0);
  ASSERT_EQ(symlink("..data/token", (dir + "/token").c_str()), 0);
  WriteFileOrDie(dir + "/ca.crt", "CA");
  auto config = LoadInClusterConfig(
      {.service_account_dir = dir, .service_host = "10.96.0.1", .service_port = "443"});
  ASSERT_TRUE(config.ok()) << config.status();
  auto creds = Credentials::Create(*config, {}).value();
  EXPECT_THAT(creds->Get()->headers, ::testing::Contains(::testing::Pair("Authorization", "Bearer token-one")));
  ASSERT_EQ(symlink("..v2", (dir + "/..data.tmp").c_str()), 0);
  ASSERT_EQ(rename((dir + "/..data.tmp").c_str(), (dir + "/..data").c_str()), 0);
  EXPECT_THAT(creds->Get()->headers, ::testing::Contains(::testing::Pair("Authorization", "Bearer token-two")));
}

}  // namespace
}  // namespace informerd::client
