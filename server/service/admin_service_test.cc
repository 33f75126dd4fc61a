// Tests of the Admin service over real gRPC on loopback (port 0), against the fake API server
// (testing/apiserver) through InformerTestEnv.
#include "server/service/admin_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/service/informer_service.h"
#include "server/service/informer_test_env.h"
#include "server/service/queue_registry.h"
#include "server/service/source_lookups.h"

namespace informerd::service {
namespace {

class AdminServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.status.ok()) << env_.status;
    queues_ = std::make_unique<QueueRegistry>(
        InformerSourceLookups(env_.registry.get(), &env_.clusters), QueueRegistryOptions{});
    informer_service_ =
        std::make_unique<InformerService>(env_.registry.get(), InformerServiceOptions{});
    admin_ = std::make_unique<AdminService>(&env_.clusters, env_.registry.get(), queues_.get(),
                                            informer_service_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(admin_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Admin::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                   grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    admin_.reset();
    informer_service_.reset();
    queues_.reset();
  }

  v1::ClusterInfo Cluster() {
    grpc::ClientContext c;
    v1::ListClustersResponse response;
    EXPECT_TRUE(stub_->ListClusters(&c, v1::ListClustersRequest(), &response).ok());
    EXPECT_EQ(response.clusters_size(), 1);
    return response.clusters_size() == 1 ? response.clusters(0) : v1::ClusterInfo();
  }

  InformerTestEnv env_{"admin-svc"};
  std::unique_ptr<QueueRegistry> queues_;
  std::unique_ptr<InformerService> informer_service_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

TEST_F(AdminServiceTest, AClusterReportsTheLastErrorOfItsInformers) {
  ASSERT_TRUE(env_.fixture->Seed(1).ok());
  v1::ClusterInfo cluster = Cluster();
  EXPECT_EQ(cluster.name(), "test");
  EXPECT_TRUE(cluster.is_default());
  EXPECT_FALSE(cluster.server().empty());
  EXPECT_EQ(cluster.last_error(), "");
  EXPECT_EQ(cluster.last_error_unix_ms(), 0);

  ASSERT_TRUE(
      env_.fixture->Fault(R"("type":"internal-error","count":-1,"message":"etcd is away")").ok());
  v1::InformerSpec spec;
  spec.mutable_resource()->set_version("v1");
  spec.mutable_resource()->set_resource("configmaps");
  spec.set_namespace_(env_.fixture->ns());
  ASSERT_TRUE(env_.registry->Ensure(spec).ok());
  // The code, the API server's message and its Kubernetes reason (the list's error, or the
  // streaming list's before it).
  const std::string readable = "INTERNAL: Internal error occurred: etcd is away (InternalError)";
  ASSERT_TRUE(Eventually([&] {
    cluster = Cluster();
    return cluster.last_error() == readable;
  })) << cluster.last_error();
  EXPECT_GT(cluster.last_error_unix_ms(), 0);

  grpc::ClientContext c;
  v1::ListInformersResponse informers;
  ASSERT_TRUE(stub_->ListInformers(&c, v1::ListInformersRequest(), &informers).ok());
  ASSERT_EQ(informers.informers_size(), 1);
  EXPECT_THAT(informers.informers(0).state().last_error(), ::testing::HasSubstr("etcd is away"));
  EXPECT_TRUE(informers.informers(0).namespaced());
  EXPECT_EQ(informers.informers(0).kind(), "ConfigMap");
}

TEST(AdminClustersTest, ADiscoveryFailureIsTheClustersLastError) {
  Clusters clusters;
  // Nothing listens on port 1: discovery cannot reach the API server.
  ASSERT_TRUE(clusters.Add({.name = "gone", .config = {.host = "https://127.0.0.1:1"}}).ok());
  InformerRegistry informers(&clusters, {});
  v1::InformerSpec spec;
  spec.mutable_resource()->set_version("v1");
  spec.mutable_resource()->set_resource("configmaps");
  EXPECT_FALSE(informers.Ensure(spec).ok());
  QueueRegistry queues(InformerSourceLookups(&informers, &clusters), {});
  InformerService informer_service(&informers, {});
  AdminService admin(&clusters, &informers, &queues, &informer_service);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  v1::ListClustersResponse response;
  ASSERT_TRUE(stub->ListClusters(&c, v1::ListClustersRequest(), &response).ok());
  ASSERT_EQ(response.clusters_size(), 1);
  EXPECT_THAT(response.clusters(0).last_error(), ::testing::StartsWith("UNAVAILABLE: "));
  EXPECT_GT(response.clusters(0).last_error_unix_ms(), 0);
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace informerd::service
