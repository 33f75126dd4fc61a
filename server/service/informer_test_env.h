// InformerTestEnv: what tests of the informer-side services (Informers, Admin) start with — a
// namespace of the fake API server (ApiServerFixture), a cluster "test" whose client carries the
// fixture's User-Agent (so faults the test arms reach only its informers), and an
// InformerRegistry on it with test-friendly backoff and stall timeout.
//
//   InformerTestEnv env("my-test");
//   ASSERT_TRUE(env.status.ok());
//   InformerService service(env.registry.get(), {});
//
// Thread safety: built and destroyed by one test thread; the registry is thread-safe.
#ifndef INFORMERD_SERVER_SERVICE_INFORMER_TEST_ENV_H_
#define INFORMERD_SERVER_SERVICE_INFORMER_TEST_ENV_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/informer/apiserver_fixture.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"

namespace informerd::service {

struct InformerTestEnv {
  explicit InformerTestEnv(const std::string& ns)
      : fixture(std::make_unique<informer::testing::ApiServerFixture>(ns)) {
    status = clusters.Add({.name = "test",
                           .config = informer::testing::ApiServerFixture::Server()->config(),
                           .user_agent = fixture->user_agent()});
    InformerRegistryOptions options;
    options.backoff.initial = absl::Milliseconds(20);
    options.backoff.max = absl::Milliseconds(400);
    options.stall_timeout = absl::Seconds(3);
    registry = std::make_unique<InformerRegistry>(&clusters, options);
  }

  // Of adding the cluster.
  absl::Status status;
  Clusters clusters;
  std::unique_ptr<informer::testing::ApiServerFixture> fixture;
  // Destroyed first (it stops every informer).
  std::unique_ptr<InformerRegistry> registry;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_INFORMER_TEST_ENV_H_
