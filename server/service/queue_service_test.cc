// The Queues service over real gRPC on loopback: client-go's workqueue invariants hold across the
// process boundary, and every bad request is refused naming its field without changing anything.
#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/queue_test_util.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using testing::QueueServer;
using testing::Spec;
using testing::WorkerStream;

TEST(QueueServiceTest, AddingAWaitingKeyAgainIsDeduplicated) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a", "ns/a", "ns/b"}).ok());
  EXPECT_EQ(s.Len("q"), 2u);
  ASSERT_TRUE(s.Add("q", {"ns/b"}).ok());
  EXPECT_EQ(s.Len("q"), 2u);
}

// A client cannot grow a queue without bound: past max_queue_keys waiting keys an Add is refused
// naming the limit, and nothing of it is added; a key already waiting still dedups.
TEST(QueueServiceTest, AnAddPastTheQueuesKeyLimitIsRefusedWhole) {
  QueueServer s(QueueServer::DefaultClusterLookups([](absl::string_view) { return nullptr; }),
                {.max_queue_keys = 3});
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a", "ns/b"}).ok());
  grpc::Status full = s.Add("q", {"ns/c", "ns/d"});
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.error_message(), HasSubstr("its limit of 3"));
  EXPECT_EQ(s.Len("q"), 2u);
  ASSERT_TRUE(s.Add("q", {"ns/c"}).ok());
  EXPECT_EQ(s.State("q").depth(), 3u);
}

// Sources are capped too: each is a binding fed on every event of its informer.
TEST(QueueServiceTest, AQueueWithTooManySourcesIsRefusedNamingTheField) {
  QueueServer s;
  v1::QueueSpec spec = Spec("many");
  for (int i = 0; i < kMaxQueueSources + 1; ++i) spec.add_sources()->set_informer_id("x");
  grpc::Status refused = s.CreateQueue(spec);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("spec.sources: 65 sources, at most 64"));
}

TEST(QueueServiceTest, AKeyAddedWhileProcessingIsDeliveredAgainAfterDone) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> first = w.ReadLeases();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  EXPECT_EQ(s.Len("q"), 0u) << "dirty while processing, not waiting";
  ASSERT_TRUE(w.Send(first[0], v1::Outcome::DONE));
  std::vector<v1::Lease> again = w.ReadLeases();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].key(), "ns/a");
  EXPECT_GT(again[0].token(), first[0].token());
}

TEST(QueueServiceTest, RateLimitedRetriesWaitLongerEachTimeUntilForgotten) {
  QueueServer s;
  v1::QueueSpec spec = Spec("q");
  spec.mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(50);
  spec.mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(10000);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  auto num_requeues = [&] {
    grpc::ClientContext ctx;
    v1::NumRequeuesRequest req;
    req.set_queue("q");
    req.set_key("ns/a");
    v1::NumRequeuesResponse resp;
    EXPECT_TRUE(s.queues().NumRequeues(&ctx, req, &resp).ok());
    return resp.requeues();
  };
  for (int i = 0; i < 3; ++i) {
    const absl::Duration want = absl::Milliseconds(50) * (1 << i);
    const absl::Time sent = absl::Now();
    ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));
    l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_GE(absl::Now() - sent, want) << "retry " << i;
    EXPECT_EQ(l[0].requeues(), i + 1);
    EXPECT_EQ(num_requeues(), i + 1);
  }
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  // SUCCESS forgets: once the outcome is applied the count is back to 0.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (num_requeues() != 0 && absl::Now() < deadline) std::this_thread::yield();
  EXPECT_EQ(num_requeues(), 0);
}

TEST(QueueServiceTest, ForgetClearsTheRetryHistory) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  {
    grpc::ClientContext ctx;
    v1::AddRateLimitedRequest req;
    req.set_queue("q");
    req.add_keys("ns/a");
    v1::AddResponse resp;
    ASSERT_TRUE(s.queues().AddRateLimited(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(s.registry().Get("q").value()->NumRequeues("ns/a"), 1);
  grpc::ClientContext ctx;
  v1::ForgetRequest req;
  req.set_queue("q");
  req.add_keys("ns/a");
  v1::ForgetResponse resp;
  ASSERT_TRUE(s.queues().Forget(&ctx, req, &resp).ok());
  EXPECT_EQ(s.registry().Get("q").value()->NumRequeues("ns/a"), 0);
}

TEST(QueueServiceTest, ShutDownWithDrainReturnsOnceHeldKeysAreDone) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  std::future<grpc::Status> drained = std::async(std::launch::async, [&] {
    grpc::ClientContext ctx;
    v1::ShutDownRequest req;
    req.set_queue("q");
    req.set_drain(true);
    v1::ShutDownResponse resp;
    return s.queues().ShutDown(&ctx, req, &resp);
  });
  // The drain is waiting in the server (not answered) while the key is held.
  ASSERT_TRUE(Eventually([&] { return s.queue_service().UnansweredDrains() == 1; }));
  EXPECT_EQ(drained.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "returned while a key was held";
  EXPECT_EQ(s.Add("q", {"ns/b"}).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  EXPECT_TRUE(drained.get().ok());
  EXPECT_TRUE(Eventually([&] { return s.queue_service().UnansweredDrains() == 0; }));
  EXPECT_TRUE(s.State("q").shutting_down());
  EXPECT_TRUE(w.Finish().ok()) << "an idle worker of a shut-down queue ends with OK";
}

size_t ThreadCount() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// A client that starts many drains of a queue whose key stays held costs no thread per call; a
// drain whose deadline passes is answered DEADLINE_EXCEEDED, and the queue stays shut down.
TEST(QueueServiceTest, ManyWaitingDrainsAreBoundedAndHonourTheirDeadline) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  ASSERT_EQ(w.ReadLeases().size(), 1u);  // held, never answered
  const size_t threads_before = ThreadCount();
  constexpr int kDrains = 100;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ShutDownResponse> responses(kDrains);
  std::vector<grpc::Status> statuses(kDrains);
  std::atomic<int> answered{0};
  v1::ShutDownRequest req;
  req.set_queue("q");
  req.set_drain(true);
  // Deadlines long enough for all of them to reach the server on a loaded machine.
  for (int i = 0; i < kDrains; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    s.queues().async()->ShutDown(contexts.back().get(), &req, &responses[i],
                                 [&, i](grpc::Status st) {
                                   statuses[i] = std::move(st);
                                   answered.fetch_add(1);
                                 });
  }
  // Once every drain waits in the server (their key stays held, so they wait until their
  // deadline), they hold no thread each ...
  ASSERT_TRUE(Eventually([&] { return s.queue_service().UnansweredDrains() == kDrains; }))
      << "waiting in the server: " << s.queue_service().UnansweredDrains();
  EXPECT_LT(ThreadCount(), threads_before + 20) << "a thread per waiting drain";
  // ... and each is answered at its deadline (the server has answered them all, too).
  ASSERT_TRUE(Eventually([&] {
    return answered.load() == kDrains && s.queue_service().UnansweredDrains() == 0;
  })) << "answered: " << answered.load();
  for (const grpc::Status& st : statuses) {  // the client's own deadline
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  }
  EXPECT_TRUE(s.State("q").shutting_down());
}

TEST(QueueServiceTest, CreatingAgainWithAnEqualSpecIsANoOpAndWithAnotherSpecFails) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(s.Add("q", {"ns/a"}).ok());
  v1::QueueSpec same = Spec("q");
  same.mutable_rate_limiter()->mutable_default_controller();  // the default, spelled out
  v1::QueueInfo info;
  EXPECT_TRUE(s.CreateQueue(same, &info).ok());
  EXPECT_EQ(info.state().depth(), 1u) << "the same queue";
  v1::QueueSpec other = Spec("q");
  other.mutable_rate_limiter()->mutable_bucket()->set_qps(1);
  other.mutable_rate_limiter()->mutable_bucket()->set_burst(1);
  EXPECT_EQ(s.CreateQueue(other).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(QueueServiceTest, BadSpecsAreRefusedNamingTheField) {
  QueueServer s;
  struct Case {
    std::function<void(v1::QueueSpec*)> edit;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](v1::QueueSpec* p) { p->set_name(""); }, grpc::StatusCode::INVALID_ARGUMENT, "spec.name"},
      {[](v1::QueueSpec* p) { p->set_name("Bad_Name"); }, grpc::StatusCode::INVALID_ARGUMENT,
       "spec.name"},
      {[](v1::QueueSpec* p) { p->set_name(std::string(254, 'a')); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.name"},
      {[](v1::QueueSpec* p) { p->mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(5); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.exponential.base_delay_ms: must be > 0"},
      {[](v1::QueueSpec* p) {
         p->mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(10);
         p->mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(5);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.exponential.max_delay_ms"},
      {[](v1::QueueSpec* p) { p->mutable_rate_limiter()->mutable_fast_slow()->set_fast_delay_ms(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.fast_slow.fast_delay_ms"},
      {[](v1::QueueSpec* p) { p->mutable_rate_limiter()->mutable_bucket()->set_burst(1); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.bucket.qps"},
      {[](v1::QueueSpec* p) { p->mutable_rate_limiter()->mutable_max_of(); },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.max_of.limiters"},
      {[](v1::QueueSpec* p) {
         p->mutable_rate_limiter()->mutable_max_of()->add_limiters()->mutable_bucket()->set_qps(-1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.rate_limiter.max_of.limiters[0].bucket.qps"},
      {[](v1::QueueSpec* p) { p->set_resync_period_ms(10); }, grpc::StatusCode::INVALID_ARGUMENT,
       "spec.resync_period_ms"},
      {[](v1::QueueSpec* p) { p->add_sources(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "spec.sources[0].informer_id: required"},
      {[](v1::QueueSpec* p) { p->add_sources()->set_informer_id("nope"); },
       grpc::StatusCode::NOT_FOUND, "spec.sources[0].informer_id: no such informer"},
      {[](v1::QueueSpec* p) { p->set_lease_timeout_ms(5); }, grpc::StatusCode::INVALID_ARGUMENT,
       "spec.lease_timeout_ms"},
      {[](v1::QueueSpec* p) {
         v1::QueueSource* src = p->add_sources();
         src->set_informer_id("x");
         src->add_predicates();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.sources[0].predicates[0]"},
      {[](v1::QueueSpec* p) {
         v1::QueueSource* src = p->add_sources();
         src->set_informer_id("x");
         src->add_predicates()->mutable_fields_changed();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.sources[0].predicates[0].fields_changed.field_paths"},
      {[](v1::QueueSpec* p) {
         v1::QueueSource* src = p->add_sources();
         src->set_informer_id("x");
         src->add_predicates()->mutable_fields_changed()->add_field_paths("spec..replicas");
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "spec.sources[0].predicates[0].fields_changed.field_paths[0]"},
      {[](v1::QueueSpec* p) {
         v1::QueueSource* src = p->add_sources();
         src->set_informer_id("x");
         src->mutable_owner();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "spec.sources[0].owner.kind"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::QueueSpec spec = Spec("q");
    cases[i].edit(&spec);
    grpc::Status status = s.CreateQueue(spec);
    EXPECT_EQ(status.error_code(), cases[i].code) << i << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(cases[i].field)) << i;
    // The machine-readable details say the same: a reason, and the field for bad input.
    const absl::Status detailed = FromGrpc(status);
    std::optional<google::rpc::ErrorInfo> info = GetErrorInfo(detailed);
    ASSERT_TRUE(info.has_value()) << i;
    EXPECT_EQ(info->domain(), "informerd.io");
    if (cases[i].code == grpc::StatusCode::INVALID_ARGUMENT) {
      EXPECT_EQ(info->reason(), "INVALID_FIELD") << i;
      std::optional<google::rpc::BadRequest> bad = GetBadRequest(detailed);
      ASSERT_TRUE(bad.has_value() && bad->field_violations_size() == 1) << i;
      EXPECT_THAT(cases[i].field, ::testing::StartsWith(bad->field_violations(0).field())) << i;
    } else {
      EXPECT_EQ(info->reason(), "INFORMER_NOT_FOUND") << i;
      EXPECT_EQ(info->metadata().at("field"), "spec.sources[0].informer_id");
    }
  }
  EXPECT_TRUE(s.registry().List().empty()) << "nothing created";
}

TEST(QueueServiceTest, BadRequestsAreRefusedNamingTheFieldAndAddNothing) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());

  grpc::Status unknown = s.Add("missing", {"ns/a"});
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("missing"));
  std::optional<google::rpc::ErrorInfo> info = GetErrorInfo(FromGrpc(unknown));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->reason(), "QUEUE_NOT_FOUND");
  EXPECT_EQ(info->metadata().at("queue"), "missing");

  grpc::Status empty_key = s.Add("q", {"ns/a", ""});
  EXPECT_EQ(empty_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty_key.error_message(), HasSubstr("keys[1]"));

  grpc::Status long_key = s.Add("q", {std::string(1025, 'k')});
  EXPECT_EQ(long_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(long_key.error_message(), HasSubstr("keys[0]"));

  std::vector<std::string> many(kMaxKeysPerRequest + 1, "ns/a");
  EXPECT_EQ(s.Add("q", many).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.Len("q"), 0u) << "a rejected batch adds nothing";

  {
    grpc::ClientContext ctx;
    v1::AddAfterRequest req;
    req.set_queue("q");
    req.add_keys("ns/a");
    req.set_delay_ms(-1);
    v1::AddResponse resp;
    grpc::Status st = s.queues().AddAfter(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("delay_ms"));
  }
  {
    grpc::ClientContext ctx;
    v1::NumRequeuesRequest req;
    req.set_queue("q");
    v1::NumRequeuesResponse resp;
    grpc::Status st = s.queues().NumRequeues(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("key"));
  }
  {
    grpc::ClientContext ctx;
    v1::DeleteQueueRequest req;
    req.set_queue("missing");
    v1::DeleteQueueResponse resp;
    EXPECT_EQ(s.queues().DeleteQueue(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(s.Len("q"), 0u);
}

TEST(QueueServiceTest, DeletingAQueueEndsItsWorkerStreams) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  grpc::ClientContext ctx;
  v1::DeleteQueueRequest req;
  req.set_queue("q");
  v1::DeleteQueueResponse resp;
  ASSERT_TRUE(s.queues().DeleteQueue(&ctx, req, &resp).ok());
  EXPECT_EQ(w.Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.Add("q", {"ns/a"}).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace informerd::service
