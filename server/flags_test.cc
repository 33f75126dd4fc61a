#include "server/flags.h"

#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// What the command line makes of the config, with flags set as ParseFlags would set them. How a
// command line is parsed (unknown flags, values of the wrong type, --flagfile) is Abseil's, tested
// on every binary by //server/testing:flags_test.
namespace informerd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(FlagsTest, WithNoFlagsTheDefaults) {
  absl::FlagSaver saver;
  absl::StatusOr<DaemonConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen, ElementsAre("127.0.0.1:7470"));
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:7471");
  EXPECT_TRUE(c->clusters.empty());
  EXPECT_FALSE(c->auth.insecure_allow_unauthenticated);
  EXPECT_FALSE(c->leader_election.enabled);
}

TEST(FlagsTest, FlagsApplyOverTheFileAndTheFileStandsWhereNoFlagIsGiven) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_config,
                WriteFile("flags.yaml",
                          "listen: [\"127.0.0.1:1\"]\nmetricsListen: \"127.0.0.1:9\"\n"
                          "clusters: [{name: a, kubeconfig: /a}]\nidleTimeout: 0s\n"
                          "insecureAllowUnauthenticated: true\n"));
  absl::StatusOr<DaemonConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen, ElementsAre("127.0.0.1:1"));
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:9");
  ASSERT_EQ(c->clusters.size(), 1u);
  EXPECT_EQ(c->clusters[0].name, "a");
  EXPECT_EQ(c->idle_timeout, absl::ZeroDuration());
  // A boolean flag left at false does not turn the file's true off.
  EXPECT_TRUE(c->auth.insecure_allow_unauthenticated);

  absl::SetFlag(&FLAGS_listen, std::vector<std::string>{"127.0.0.1:2", "unix:///tmp/s"});
  absl::SetFlag(&FLAGS_metrics_listen, MetricsListenFlag{.address = ""});
  absl::SetFlag(&FLAGS_kubeconfig, "/b");
  absl::SetFlag(&FLAGS_context, "ctx");
  absl::SetFlag(&FLAGS_shutdown_grace, absl::Seconds(5));
  absl::SetFlag(&FLAGS_idle_timeout, absl::Seconds(90));
  absl::SetFlag(&FLAGS_log_format, "json");
  absl::SetFlag(&FLAGS_log_level, "debug");
  absl::SetFlag(&FLAGS_tls_cert, "/c.pem");
  absl::SetFlag(&FLAGS_tls_key, "/k.pem");
  c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen, ElementsAre("127.0.0.1:2", "unix:///tmp/s"));
  EXPECT_EQ(c->metrics_listen, "");  // given empty: no HTTP listener
  ASSERT_EQ(c->clusters.size(), 1u);
  EXPECT_EQ(c->clusters[0].name, "default");
  EXPECT_TRUE(c->clusters[0].is_default);
  EXPECT_EQ(c->clusters[0].kubeconfig, "/b");
  EXPECT_EQ(c->clusters[0].context, "ctx");
  EXPECT_EQ(c->shutdown_grace_period, absl::Seconds(5));
  EXPECT_EQ(c->idle_timeout, absl::Seconds(90));
  EXPECT_EQ(c->log_format, "json");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->tls.cert_file, "/c.pem");
  EXPECT_EQ(c->tls.key_file, "/k.pem");
}

TEST(FlagsTest, TheBooleanFlagsTurnTheirSettingOn) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_insecure_allow_unauthenticated, true);
  absl::SetFlag(&FLAGS_in_cluster, true);
  absl::StatusOr<DaemonConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->auth.insecure_allow_unauthenticated);
  ASSERT_EQ(c->clusters.size(), 1u);
  EXPECT_TRUE(c->clusters[0].in_cluster);
}

TEST(FlagsTest, LeaderElectionFlagsAreKubeControllerManagers) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_leader_elect, true);
  absl::SetFlag(&FLAGS_leader_elect_resource_namespace, "ns");
  absl::SetFlag(&FLAGS_leader_elect_resource_name, "n");
  absl::SetFlag(&FLAGS_leader_elect_identity, "me");
  absl::SetFlag(&FLAGS_advertise_address, "host:1");
  absl::SetFlag(&FLAGS_leader_elect_lease_duration, absl::Seconds(6));
  absl::SetFlag(&FLAGS_leader_elect_renew_deadline, absl::Seconds(4));
  absl::SetFlag(&FLAGS_leader_elect_retry_period, absl::Seconds(1));
  absl::StatusOr<DaemonConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  const LeaderElectionConfig& le = c->leader_election;
  EXPECT_TRUE(le.enabled);
  EXPECT_EQ(le.lease_namespace, "ns");
  EXPECT_EQ(le.lease_name, "n");
  EXPECT_EQ(le.identity, "me");
  EXPECT_EQ(le.advertise_address, "host:1");
  EXPECT_EQ(le.lease_duration, absl::Seconds(6));
  EXPECT_EQ(le.renew_deadline, absl::Seconds(4));
  EXPECT_EQ(le.retry_period, absl::Seconds(1));
  // The file's checks apply to what the flags make.
  absl::SetFlag(&FLAGS_leader_elect_retry_period, absl::Seconds(9));
  EXPECT_THAT(ConfigFromFlags().status().message(),
              HasSubstr("flags: leaderElection.renewDeadline: must be greater than retryPeriod"));
}

TEST(FlagsTest, ValuesTheDaemonRefusesNameTheirFlag) {
  auto error = [](auto* flag, auto value) {
    absl::FlagSaver saver;
    absl::SetFlag(flag, value);
    return std::string(ConfigFromFlags().status().message());
  };
  EXPECT_EQ(error(&FLAGS_shutdown_grace, absl::Seconds(-1)),
            "Illegal value '-1s' specified for flag 'shutdown_grace': must be a finite duration, "
            "0 or more");
  EXPECT_THAT(error(&FLAGS_idle_timeout, absl::InfiniteDuration()),
              HasSubstr("Illegal value 'inf' specified for flag 'idle_timeout'"));
  EXPECT_THAT(error(&FLAGS_log_format, "xml"),
              HasSubstr("Illegal value 'xml' specified for flag 'log_format': \"xml\" is not "
                        "text or json"));
  EXPECT_THAT(error(&FLAGS_log_level, "loud"),
              HasSubstr("flag 'log_level': must be one of trace, debug, info, warn, error"));
  EXPECT_THAT(error(&FLAGS_listen, std::vector<std::string>{"nocolon"}),
              HasSubstr("flags: listen[0]: \"nocolon\" is not host:port or unix:///path"));
  EXPECT_THAT(error(&FLAGS_tls_cert, "/c.pem"), HasSubstr("flags: tls: cert and key go together"));
  EXPECT_THAT(error(&FLAGS_config, "/nonexistent.yaml"), HasSubstr("/nonexistent.yaml"));
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_in_cluster, true);
    absl::SetFlag(&FLAGS_kubeconfig, "/x");
    EXPECT_THAT(ConfigFromFlags().status().message(),
                HasSubstr("flag 'in_cluster': cannot be combined with --kubeconfig"));
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_config, WriteFile("bad.yaml", "listen: 7\nlisen: []\n"));
    EXPECT_THAT(ConfigFromFlags().status().message(), HasSubstr("bad.yaml"));
  }
}

}  // namespace
}  // namespace informerd
