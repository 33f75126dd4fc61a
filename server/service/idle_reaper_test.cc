#include "server/service/idle_reaper.h"

#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/informer_test_env.h"
#include "server/service/queue_registry.h"
#include "server/service/source_lookups.h"

namespace informerd::service {
namespace {

constexpr absl::Duration kIdle = absl::Minutes(10);

class NullSink : public LeaseSink {
 public:
  void Deliver(std::vector<workqueue::Lease>) override {}
  void Close(const absl::Status&) override {}
};

// Registries on a FakeClock over the fake API server, and a reaper with a 10-minute idle timeout.
class IdleReaperTest : public ::testing::Test {
 protected:
  IdleReaperTest() : env_("idle-reaper") {
    informers_ = std::make_unique<InformerRegistry>(&env_.clusters,
                                                    InformerRegistryOptions{.clock = &clock_});
    queues_ = std::make_unique<QueueRegistry>(
        InformerSourceLookups(informers_.get(), &env_.clusters),
        QueueRegistryOptions{.clock = &clock_});
    reaper_ = std::make_unique<IdleReaper>(informers_.get(), queues_.get(),
                                           IdleReaperOptions{.idle_timeout = kIdle,
                                                             .clock = &clock_});
  }
  ~IdleReaperTest() override {
    reaper_.reset();
    queues_.reset();
    informers_.reset();
  }

  // A ConfigMap informer of the test's namespace, distinct per `selector`.
  std::string Ensure(const std::string& selector) {
    v1::InformerSpec spec;
    spec.mutable_resource()->set_version("v1");
    spec.mutable_resource()->set_resource("configmaps");
    spec.set_namespace_(env_.fixture->ns());
    spec.set_label_selector(selector);
    absl::StatusOr<InformerRegistry::Entry> e = informers_->Ensure(spec);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->id : "";
  }
  std::shared_ptr<NamedQueue> Queue(const std::string& name, const std::string& informer_id) {
    v1::QueueSpec spec;
    spec.set_name(name);
    if (!informer_id.empty()) spec.add_sources()->set_informer_id(informer_id);
    absl::StatusOr<std::shared_ptr<NamedQueue>> q = queues_->Create(spec);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? *q : nullptr;
  }
  bool HasInformer(const std::string& id) {
    for (const InformerRegistry::Entry& e : informers_->List()) {
      if (e.id == id) return true;
    }
    return false;
  }
  bool HasQueue(const std::string& name) {
    for (const std::shared_ptr<NamedQueue>& q : queues_->List()) {
      if (q->name() == name) return true;
    }
    return false;
  }

  FakeClock clock_;
  InformerTestEnv env_;
  std::unique_ptr<InformerRegistry> informers_;
  std::unique_ptr<QueueRegistry> queues_;
  std::unique_ptr<IdleReaper> reaper_;
};

TEST_F(IdleReaperTest, UnusedOnesGoAfterTheIdleTimeoutWhilePinnedAndUsedOnesStay) {
  ASSERT_TRUE(env_.status.ok());
  ASSERT_TRUE(env_.fixture->Seed(2).ok());
  const std::string unused = Ensure("a=unused");
  const std::string pinned = Ensure("a=pinned");
  ASSERT_TRUE(informers_->Pin(pinned).ok());
  const std::string held = Ensure("a=held");
  // What a Watch stream or a Work stream's object informer holds.
  std::shared_ptr<informer::SharedInformer> holder = informers_->Find(held);
  const std::string source = Ensure("a=source");
  Queue("unused-queue", "");
  Queue("pinned-queue", "")->Pin();
  std::shared_ptr<NamedQueue> worked = Queue("worked-queue", source);
  absl::StatusOr<std::unique_ptr<Worker>> worker =
      worked->Attach({.name = "w", .max_in_flight = 1}, std::make_shared<NullSink>());
  ASSERT_TRUE(worker.ok()) << worker.status();

  clock_.Advance(kIdle - absl::Seconds(1));
  EXPECT_TRUE(HasInformer(unused));
  EXPECT_TRUE(HasQueue("unused-queue"));

  // One idle timeout and one sweep period after the last use.
  clock_.Advance(reaper_->period() + absl::Seconds(1));
  EXPECT_FALSE(HasInformer(unused));
  EXPECT_FALSE(HasQueue("unused-queue"));
  EXPECT_TRUE(HasInformer(pinned));
  EXPECT_TRUE(HasInformer(held));
  EXPECT_TRUE(HasInformer(source)) << "a live queue's source is in use";
  EXPECT_TRUE(HasQueue("pinned-queue"));
  EXPECT_TRUE(HasQueue("worked-queue")) << "a queue with a Work stream is in use";
  EXPECT_EQ(queues_->Get("unused-queue").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(informers_->Get(unused).status().code(), absl::StatusCode::kNotFound);

  // Their users gone, they follow one idle timeout later: the queue, then its source.
  holder.reset();
  (*worker).reset();
  worked.reset();
  clock_.Advance(kIdle + reaper_->period());
  EXPECT_FALSE(HasInformer(held));
  EXPECT_FALSE(HasQueue("worked-queue"));
  clock_.Advance(kIdle + reaper_->period());
  EXPECT_FALSE(HasInformer(source));
  EXPECT_TRUE(HasInformer(pinned));
  EXPECT_TRUE(HasQueue("pinned-queue"));
}

TEST_F(IdleReaperTest, ACallNamingItIsAUse) {
  ASSERT_TRUE(env_.status.ok());
  ASSERT_TRUE(env_.fixture->Seed(1).ok());
  const std::string id = Ensure("a=called");
  Queue("called-queue", "");
  clock_.Advance(kIdle - absl::Minutes(1));
  ASSERT_TRUE(informers_->Get(id).ok());
  ASSERT_TRUE(queues_->Get("called-queue").ok());
  const absl::Time used = clock_.Now();
  clock_.Advance(kIdle - absl::Minutes(1));
  EXPECT_TRUE(HasInformer(id));
  EXPECT_TRUE(HasQueue("called-queue"));
  EXPECT_EQ(queues_->List()[0]->last_used(), used);
  clock_.Advance(absl::Minutes(1) + reaper_->period());
  EXPECT_FALSE(HasInformer(id));
  EXPECT_FALSE(HasQueue("called-queue"));
}

}  // namespace
}  // namespace informerd::service
