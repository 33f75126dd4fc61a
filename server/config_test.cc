#include "server/config.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "yaml-cpp/yaml.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Status Error(absl::string_view yaml) { return ParseConfig(yaml, "c.yaml").status(); }

TEST(ConfigTest, AnEmptyFileGivesTheDefaults) {
  absl::StatusOr<DaemonConfig> c = ParseConfig("", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen, ElementsAre("127.0.0.1:7470"));
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:7471");
  EXPECT_TRUE(c->clusters.empty());
  EXPECT_EQ(c->shutdown_grace_period, absl::Seconds(30));
  EXPECT_EQ(c->idle_timeout, absl::Minutes(10));
}

TEST(ConfigTest, TheIdleTimeoutComesFromTheFile) {
  absl::StatusOr<DaemonConfig> c = ParseConfig("idleTimeout: 0s\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->idle_timeout, absl::ZeroDuration());
  EXPECT_FALSE(ParseConfig("idleTimeout: soon\n", "c.yaml").ok());
}

TEST(ConfigTest, AFullFileIsRead) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(R"(
listen: ["127.0.0.1:0", "unix:///tmp/i.sock"]
metricsListen: "127.0.0.1:0"
shutdownGracePeriod: 1m30s
limits: {maxMessageBytes: 1048576, maxConcurrentStreams: 50, maxSubscribers: 7}
keepalive: {time: 2s, timeout: 1s}
clusters:
  - name: prod
    kubeconfig: /k/config
    context: admin
    qps: 12.5
    burst: 20
  - name: local
    inCluster: true
    default: true
informers:
  - name: pods
    cluster: prod
    resource: {version: v1, resource: pods}
    namespace: team-a
    labelSelector: "app=web"
    indexes: [{name: by-node, fieldPath: spec.nodeName}]
    transform: {dropPaths: [metadata.annotations]}
queues:
  - name: reconcile
    rateLimiter: {exponential: {baseDelayMs: 5, maxDelayMs: 60000}}
    sources: [{informerId: pods}]
    resyncPeriodMs: 600000
)",
                                               "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen, ElementsAre("127.0.0.1:0", "unix:///tmp/i.sock"));
  EXPECT_EQ(c->shutdown_grace_period, absl::Seconds(90));
  EXPECT_EQ(c->max_message_bytes, 1048576);
  EXPECT_EQ(c->max_concurrent_streams, 50);
  EXPECT_EQ(c->max_subscribers, 7);
  EXPECT_EQ(c->keepalive_time, absl::Seconds(2));
  ASSERT_EQ(c->clusters.size(), 2u);
  EXPECT_EQ(c->clusters[0].kubeconfig, "/k/config");
  EXPECT_EQ(c->clusters[0].context, "admin");
  EXPECT_DOUBLE_EQ(c->clusters[0].qps, 12.5);
  EXPECT_EQ(c->clusters[0].burst, 20);
  EXPECT_TRUE(c->clusters[1].in_cluster);
  EXPECT_TRUE(c->clusters[1].is_default);
  ASSERT_EQ(c->informers.size(), 1u);
  EXPECT_EQ(c->informers[0].alias, "pods");
  EXPECT_EQ(c->informers[0].spec.resource().resource(), "pods");
  EXPECT_EQ(c->informers[0].spec.label_selector(), "app=web");
  ASSERT_EQ(c->informers[0].spec.indexes_size(), 1);
  EXPECT_EQ(c->informers[0].spec.indexes(0).field_path(), "spec.nodeName");
  EXPECT_EQ(c->informers[0].spec.transform().drop_paths(0), "metadata.annotations");
  ASSERT_EQ(c->queues.size(), 1u);
  EXPECT_EQ(c->queues[0].rate_limiter().exponential().max_delay_ms(), 60000);
  EXPECT_EQ(c->queues[0].sources(0).informer_id(), "pods");
  EXPECT_EQ(c->queues[0].resync_period_ms(), 600000);
}

TEST(ConfigTest, MistakesAreNamed) {
  EXPECT_THAT(Error("listne: [a]").message(), HasSubstr("c.yaml: listne: unknown key"));
  EXPECT_THAT(Error("listen: [nocolon]").message(), HasSubstr("listen[0]"));
  EXPECT_THAT(Error("shutdownGracePeriod: soon").message(),
              HasSubstr("shutdownGracePeriod: \"soon\" is not a duration"));
  EXPECT_THAT(Error("limits: {maxSubscribers: 0}").message(),
              HasSubstr("limits.maxSubscribers: must be in [1,"));
  EXPECT_THAT(Error("limits: {maxSubscribers: many}").message(),
              HasSubstr("limits.maxSubscribers: must be an integer"));
  EXPECT_THAT(Error("keepalive: {time: 10ms}").message(),
              HasSubstr("keepalive.time: must be at least 1s"));
  EXPECT_THAT(Error("clusters: [{name: a, kubeconfig: /x, inCluster: true}]").message(),
              HasSubstr("clusters[0].inCluster: cannot be combined with kubeconfig"));
  EXPECT_THAT(Error("clusters: [{name: a}, {name: a}]").message(),
              HasSubstr("clusters[1].name: \"a\" is used twice"));
  EXPECT_THAT(Error("clusters: [{name: a, qps: -1}]").message(), HasSubstr("clusters[0].qps"));
  EXPECT_THAT(Error("clusters: [{nmae: a}]").message(), HasSubstr("clusters[0].nmae: unknown key"));
  EXPECT_THAT(Error("clusters: [{default: true}, {default: true}]").message(),
              HasSubstr("more than one is the default"));
  EXPECT_THAT(Error("informers: [{resource: {version: v1, resource: pods}, namspace: x}]").message(),
              HasSubstr("informers[0]"));
  EXPECT_THAT(Error("informers: [{name: a}, {name: a}]").message(),
              HasSubstr("informers[1].name: \"a\" is used twice"));
  EXPECT_THAT(Error("queues: [{name: q, rateLimiter: {exponential: {baseDelayMs: x}}}]").message(),
              HasSubstr("queues[0]"));
  EXPECT_THAT(Error("tls: {cert: a.pem}").message(), HasSubstr("tls: cert and key go together"));
  EXPECT_THAT(Error("logLevel: loud").message(), HasSubstr("logLevel: must be one of"));
  EXPECT_THAT(Error("logFormat: xml").message(), HasSubstr("logFormat: \"xml\" is not text or json"));
  EXPECT_THAT(Error("listen: [a").message(), HasSubstr("c.yaml:"));  // YAML syntax, with a place
  EXPECT_THAT(Error("- just\n- a list").message(), HasSubstr("must be a mapping"));
  EXPECT_TRUE(absl::IsInvalidArgument(Error("informers: 3")));
}

TEST(ConfigTest, AuthenticationAuthorizationAndLimitsAreRead) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(R"(
authentication:
  audiences: [informerd, other]
  cacheTTL: 3s
  unixPeers: [{uid: 1000, user: alice, groups: [dev, ops]}, {uid: 0, user: root-user}]
authorization: {allowTTL: 5s, denyTTL: 2s, cacheSize: 100, reviewTimeout: 1s}
callerLimits: {informers: 3, queues: 4, streams: 5, inFlight: 6}
)",
                                               "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->auth.insecure_allow_unauthenticated);  // the default: everything checked
  EXPECT_THAT(c->auth.audiences, ::testing::ElementsAre("informerd", "other"));
  EXPECT_EQ(c->auth.token_ttl, absl::Seconds(3));
  ASSERT_EQ(c->auth.unix_peers.size(), 2u);
  EXPECT_EQ(c->auth.unix_peers[0].uid, 1000u);
  EXPECT_EQ(c->auth.unix_peers[0].user, "alice");
  EXPECT_THAT(c->auth.unix_peers[0].groups, ::testing::ElementsAre("dev", "ops"));
  EXPECT_EQ(c->auth.allow_ttl, absl::Seconds(5));
  EXPECT_EQ(c->auth.deny_ttl, absl::Seconds(2));
  EXPECT_EQ(c->auth.cache_size, 100u);
  EXPECT_EQ(c->auth.review_timeout, absl::Seconds(1));
  EXPECT_EQ(c->auth.limits.informers, 3);
  EXPECT_EQ(c->auth.limits.queues, 4);
  EXPECT_EQ(c->auth.limits.streams, 5);
  EXPECT_EQ(c->auth.limits.in_flight, 6);

  c = ParseConfig("insecureAllowUnauthenticated: true\n", "c.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->auth.insecure_allow_unauthenticated);
}

TEST(ConfigTest, AuthenticationMistakesAreNamed) {
  EXPECT_THAT(Error("authentication: {unixPeers: [{uid: -1, user: a}]}").message(),
              HasSubstr("authentication.unixPeers[0].uid: must be in [0,"));
  EXPECT_THAT(Error("authentication: {unixPeers: [{uid: 1}]}").message(),
              HasSubstr("authentication.unixPeers[0].user: required"));
  EXPECT_THAT(Error("authentication: {unixPeers: [{uid: 1, user: \"\"}]}").message(),
              HasSubstr("authentication.unixPeers[0].user: must not be empty"));
  EXPECT_THAT(Error("authentication: {unixPeers: {uid: 1}}").message(),
              HasSubstr("authentication.unixPeers: must be a list"));
  EXPECT_THAT(Error("authentication: {cacheTtl: 1s}").message(),
              HasSubstr("authentication.cacheTtl: unknown key"));
  EXPECT_THAT(Error("authorization: {allowTTL: forever}").message(),
              HasSubstr("authorization.allowTTL: \"forever\" is not a duration"));
  EXPECT_THAT(Error("authorization: {reviewTimeout: 1ms}").message(),
              HasSubstr("authorization.reviewTimeout: must be at least 100ms"));
  EXPECT_THAT(Error("callerLimits: {streams: 0}").message(),
              HasSubstr("callerLimits.streams: must be in [1,"));
  EXPECT_THAT(Error("insecureAllowUnauthenticated: maybe").message(),
              HasSubstr("insecureAllowUnauthenticated: must be true or false"));
}

TEST(ConfigTest, AFileThatCannotBeReadIsNamed) {
  absl::Status s = LoadConfigFile("/nonexistent/informerd.yaml").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/informerd.yaml"));
}

TEST(ConfigTest, LeaderElectionFromTheFile) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(R"(
leaderElection:
  enabled: true
  lease: {namespace: informerd, name: my-set}
  identity: informerd-0
  advertiseAddress: 10.0.0.5:7470
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 4s
)",
                                               "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const LeaderElectionConfig& le = c->leader_election;
  EXPECT_TRUE(le.enabled);
  EXPECT_EQ(le.lease_namespace, "informerd");
  EXPECT_EQ(le.lease_name, "my-set");
  EXPECT_EQ(le.identity, "informerd-0");
  EXPECT_EQ(le.advertise_address, "10.0.0.5:7470");
  EXPECT_EQ(le.lease_duration, absl::Seconds(30));
  EXPECT_EQ(le.renew_deadline, absl::Seconds(20));
  EXPECT_EQ(le.retry_period, absl::Seconds(4));

  // client-go's defaults.
  c = ParseConfig("leaderElection: {enabled: true}", "c.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->leader_election.lease_duration, absl::Seconds(15));
  EXPECT_EQ(c->leader_election.renew_deadline, absl::Seconds(10));
  EXPECT_EQ(c->leader_election.retry_period, absl::Seconds(2));
  EXPECT_EQ(c->leader_election.lease_name, "informerd");
}

TEST(ConfigTest, LeaderElectionMistakesAreNamed) {
  EXPECT_THAT(Error("leaderElection: {enabeld: true}").message(),
              HasSubstr("leaderElection.enabeld: unknown key"));
  EXPECT_THAT(Error("leaderElection: {enabled: sure}").message(),
              HasSubstr("leaderElection.enabled"));
  EXPECT_THAT(Error("leaderElection: {lease: {nam: x}}").message(),
              HasSubstr("leaderElection.lease.nam: unknown key"));
  EXPECT_THAT(Error("leaderElection: {enabled: true, renewDeadline: 20s}").message(),
              HasSubstr("leaderElection.leaseDuration: must be greater than renewDeadline"));
  EXPECT_THAT(Error("leaderElection: {enabled: true, retryPeriod: 9s}").message(),
              HasSubstr("leaderElection.renewDeadline: must be greater than retryPeriod * 1.2"));
  EXPECT_THAT(Error("leaderElection: {enabled: true, leaseDuration: soon}").message(),
              HasSubstr("leaderElection.leaseDuration"));
  EXPECT_THAT(Error("leaderElection: {enabled: true, advertiseAddress: nocolon}").message(),
              HasSubstr("leaderElection.advertiseAddress"));
}

TEST(ConfigTest, TheDeployedConfigIsOneTheDaemonReads) {
  // deploy/informerd/configmap.yaml's data["config.yaml"], through the daemon's own parser.
  YAML::Node manifest = YAML::LoadFile("deploy/informerd/configmap.yaml");
  ASSERT_TRUE(manifest["data"]["config.yaml"]) << "no data.config.yaml";
  absl::StatusOr<DaemonConfig> c =
      ParseConfig(manifest["data"]["config.yaml"].as<std::string>(), "configmap.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->leader_election.enabled);
  EXPECT_EQ(c->leader_election.lease_name, "informerd");
  EXPECT_EQ(c->leader_election.lease_namespace, "informerd");
  // client-go's timings, on which the exclusion argument rests.
  EXPECT_EQ(c->leader_election.lease_duration, absl::Seconds(15));
  EXPECT_EQ(c->leader_election.renew_deadline, absl::Seconds(10));
  EXPECT_EQ(c->leader_election.retry_period, absl::Seconds(2));
  ASSERT_EQ(c->clusters.size(), 1u);
  EXPECT_TRUE(c->clusters[0].in_cluster);
  EXPECT_FALSE(c->auth.insecure_allow_unauthenticated);
  EXPECT_FALSE(c->tls.cert_file.empty());
}

}  // namespace
}  // namespace informerd
