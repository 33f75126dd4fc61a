// Priorities over the Queues and Work services (real gRPC on loopback): the cases of
// controller-runtime's priorityqueue_test.go that are about order and priority, table-driven and
// named after the originals, each run as a client would — Add/AddAfter/AddRateLimited with
// `priority`, then a Work stream of credit 1 that answers each lease — and informerd's own rules
// at this layer: a lease says the priority its key waited at, a requeue keeps it unless the
// outcome names one, a give-back keeps it, out-of-range priorities are refused naming the field,
// aging comes from the spec, QueueState and /metrics show depth by priority with bounded series.
//
// The originals that are about time (a key ready only once its After has passed, rate limits of
// several keys not affecting each other) run on the core queue with a fake clock
// (server/workqueue/priority_test.cc), where the differences from controller-runtime are
// explained; over gRPC a fake clock would only test the same code through a slower path.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/eventually.h"
#include "base/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/queue_test_util.h"

namespace informerd::service {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pair;
using testing::QueueServer;
using testing::Spec;
using testing::WorkerStream;

// One client call of a case.
struct Step {
  enum class Call { kAdd, kAddAfter, kAddRateLimited };
  Call call = Call::kAdd;
  std::string key;
  std::optional<int32_t> priority;
  int64_t delay_ms = 0;
};

Step Add(std::string key, std::optional<int32_t> priority = std::nullopt) {
  return {.call = Step::Call::kAdd, .key = std::move(key), .priority = priority};
}
Step AddAfter(std::string key, int64_t delay_ms, std::optional<int32_t> priority = std::nullopt) {
  return {.call = Step::Call::kAddAfter,
          .key = std::move(key),
          .priority = priority,
          .delay_ms = delay_ms};
}

grpc::Status Call(QueueServer& s, const std::string& queue, const Step& step) {
  grpc::ClientContext ctx;
  v1::AddResponse resp;
  switch (step.call) {
    case Step::Call::kAdd: {
      v1::AddRequest req;
      req.set_queue(queue);
      req.add_keys(step.key);
      if (step.priority.has_value()) req.set_priority(*step.priority);
      return s.queues().Add(&ctx, req, &resp);
    }
    case Step::Call::kAddAfter: {
      v1::AddAfterRequest req;
      req.set_queue(queue);
      req.add_keys(step.key);
      req.set_delay_ms(step.delay_ms);
      if (step.priority.has_value()) req.set_priority(*step.priority);
      return s.queues().AddAfter(&ctx, req, &resp);
    }
    case Step::Call::kAddRateLimited: {
      v1::AddRateLimitedRequest req;
      req.set_queue(queue);
      req.add_keys(step.key);
      if (step.priority.has_value()) req.set_priority(*step.priority);
      return s.queues().AddRateLimited(&ctx, req, &resp);
    }
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "unknown call");
}

struct OrderCase {
  // The It(...) of priorityqueue_test.go this case ports.
  std::string name;
  std::vector<Step> steps;
  // The keys as the Work stream hands them out, with the priority each waited at.
  std::vector<std::pair<std::string, int32_t>> want;
  // QueueState.depth_by_priority after the steps, before any lease.
  std::vector<std::pair<int32_t, uint64_t>> want_depth;
};

std::vector<OrderCase> OrderCases() {
  std::vector<OrderCase> cases = {
      {.name = "returns an item",
       .steps = {Add("foo")},
       .want = {{"foo", 0}},
       .want_depth = {{0, 1}}},
      {.name = "returns items in order",
       .steps = {Add("foo"), Add("bar")},
       .want = {{"foo", 0}, {"bar", 0}},
       .want_depth = {{0, 2}}},
      {.name = "de-duplicates items",
       .steps = {Add("foo"), Add("foo")},
       .want = {{"foo", 0}},
       .want_depth = {{0, 1}}},
      {.name = "retains the highest priority",
       .steps = {Add("foo", 1), Add("foo", 2)},
       .want = {{"foo", 2}},
       .want_depth = {{2, 1}}},
      {.name = "will not decrease the priority",
       .steps = {Add("foo", 2), Add("foo", 1)},
       .want = {{"foo", 2}},
       .want_depth = {{2, 1}}},
      {.name = "gets pushed to the front if the priority increases",
       .steps = {Add("foo"), Add("bar"), Add("baz"), Add("baz", 1)},
       .want = {{"baz", 1}, {"foo", 0}, {"bar", 0}},
       .want_depth = {{1, 1}, {0, 2}}},
      {.name = "doesn't include non-ready items in Len",
       .steps = {AddAfter("foo", 3600000), Add("baz"), AddAfter("bar", 3600000), Add("bal")},
       .want = {{"baz", 0}, {"bal", 0}},
       .want_depth = {{0, 2}}},
      {.name = "follows FIFO order in the new priority queue when item priority changes",
       .steps = {Add("foo", 0), Add("bar", 1), Add("foo", 1)},
       .want = {{"bar", 1}, {"foo", 1}},
       .want_depth = {{1, 2}}},
      // The original's After of -1 s and 0 (its +1 s variant is timing: the core test's).
      {.name = "high priority items are returned before low priority items multiple times",
       .want_depth = {{10, 20}, {5, 20}, {0, 20}, {-5, 20}, {-10, 20}}},
  };
  OrderCase& many = cases.back();
  const std::vector<std::pair<std::string, int32_t>> levels = {
      {"high", 10}, {"upperMiddle", 5}, {"middle", 0}, {"lowMiddle", -5}, {"low", -10}};
  for (int i = 0; i < 20; ++i) {
    for (const auto& [name, priority] : levels) {
      // Half as plain adds, half as AddAfter(0): the original's "after <= 0" adds.
      many.steps.push_back(i % 2 == 0 ? Add(absl::StrCat(name, "-", i), priority)
                                      : AddAfter(absl::StrCat(name, "-", i), 0, priority));
    }
  }
  for (const auto& [name, priority] : levels) {
    for (int i = 0; i < 20; ++i) many.want.emplace_back(absl::StrCat(name, "-", i), priority);
  }
  return cases;
}

TEST(PriorityServiceTest, ControllerRuntimesOrderCasesOverGrpc) {
  for (const OrderCase& c : OrderCases()) {
    SCOPED_TRACE(c.name);
    QueueServer s;
    ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
    for (const Step& step : c.steps) {
      grpc::Status st = Call(s, "q", step);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    std::vector<std::pair<int32_t, uint64_t>> depth;
    const v1::QueueState state = s.State("q");
    for (const v1::PriorityDepth& d : state.depth_by_priority()) {
      depth.emplace_back(d.priority(), d.depth());
    }
    EXPECT_THAT(depth, ElementsAreArray(c.want_depth));
    WorkerStream w(s.work(), "q", 1);
    ASSERT_NE(w.ReadStarted(), "");
    EXPECT_THAT(w.TakePriorities(c.want.size()), ElementsAreArray(c.want));
    EXPECT_EQ(s.Len("q"), 0u);
  }
}

TEST(PriorityServiceTest, ARetryKeepsTheLeasesPriorityUnlessTheOutcomeNamesOne) {
  QueueServer s;
  v1::QueueSpec spec = Spec("q");
  // Retries come back after 1 ms, so the order below is the queue's, not the limiter's.
  spec.mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(1);
  spec.mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(1);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(Call(s, "q", Add("low", -100)).ok());
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].priority(), -100);
  // While "low" is held, "mid" waits at 0: a retry of "low" without a priority stays at -100
  // and so goes after "mid".
  ASSERT_TRUE(Call(s, "q", Add("mid")).ok());
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::RETRY));
  EXPECT_THAT(w.TakePriorities(2), ElementsAre(Pair("mid", 0), Pair("low", -100)));
  // A requeue that names a priority waits at it.
  ASSERT_TRUE(Call(s, "q", Add("low", -100)).ok());
  l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  ASSERT_TRUE(Call(s, "q", Add("mid")).ok());
  v1::Outcome o = WorkerStream::Outcome(l[0].key(), l[0].token(), v1::Outcome::REQUEUE_AFTER, 0);
  o.set_priority(5);
  ASSERT_TRUE(w.Send({o}));
  EXPECT_THAT(w.TakePriorities(2), ElementsAre(Pair("low", 5), Pair("mid", 0)));
}

TEST(PriorityServiceTest, AKeyGivenBackByAnEndedStreamKeepsItsPriority) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(Call(s, "q", Add("low", -7)).ok());
  {
    WorkerStream w(s.work(), "q", 1);
    ASSERT_NE(w.ReadStarted(), "");
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    ASSERT_TRUE(Call(s, "q", Add("mid")).ok());
  }  // cancelled while holding "low": the key goes back
  ASSERT_TRUE(Eventually([&] { return s.State("q").depth() == 2; }));
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  EXPECT_THAT(w.TakePriorities(2), ElementsAre(Pair("mid", 0), Pair("low", -7)));
}

// A give-back keeps is_in_initial_list too: the key is the same unfinished startup work.
TEST(PriorityServiceTest, AKeyGivenBackKeepsItsInitialListMark) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  NamedQueue& q = *s.registry().Get("q").value();
  ASSERT_TRUE(q.queue_for_testing().Add("initial", -5, /*initial_list=*/true).ok());
  {
    WorkerStream w(s.work(), "q", 1);
    ASSERT_NE(w.ReadStarted(), "");
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_TRUE(l[0].is_in_initial_list());
  }  // cancelled while holding it
  ASSERT_TRUE(Eventually([&] { return s.State("q").depth() == 1; }));
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.TakeLeases(1);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].is_in_initial_list());
  EXPECT_EQ(l[0].priority(), -5);
  // A client's Add is never initial.
  ASSERT_TRUE(Call(s, "q", Add("client")).ok());
  l = w.TakeLeases(1);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_FALSE(l[0].is_in_initial_list());
}

TEST(PriorityServiceTest, PrioritiesOutOfRangeAreRefusedNamingTheField) {
  QueueServer s;
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  for (const Step& step : {Add("a", 1000001), AddAfter("a", 10, -1000001),
                           Step{.call = Step::Call::kAddRateLimited, .key = "a",
                                .priority = INT32_MIN}}) {
    grpc::Status st = Call(s, "q", step);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("priority: must be in -1000000..1000000"));
  }
  EXPECT_EQ(s.State("q").depth() + s.State("q").delayed(), 0u);
  // The bounds themselves are taken.
  ASSERT_TRUE(Call(s, "q", Add("max", 1000000)).ok());
  ASSERT_TRUE(Call(s, "q", Add("min", -1000000)).ok());

  // An outcome's priority out of range is refused and the key stays held.
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key(), "max");
  v1::Outcome bad = WorkerStream::Outcome(l[0].key(), l[0].token(), v1::Outcome::RETRY);
  bad.set_priority(2000000);
  ASSERT_TRUE(w.Send({bad}));
  std::vector<v1::Refusal> refusals = w.ReadRefusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0].reason(), v1::INVALID_FIELD);
  EXPECT_THAT(refusals[0].message(), HasSubstr("outcomes[0].priority"));
  ASSERT_TRUE(w.Send(l[0], v1::Outcome::SUCCESS));
  EXPECT_THAT(w.TakePriorities(1), ElementsAre(Pair("min", -1000000)));

  // And so are a spec's.
  v1::QueueSpec spec = Spec("bad");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id("any");
  src->mutable_priorities()->set_unchanged(-1000001);
  grpc::Status st = s.CreateQueue(spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("spec.sources[0].priorities.unchanged: must be in -1000000..1000000"));
  spec = Spec("bad");
  spec.set_priority_aging_ms(999);
  st = s.CreateQueue(spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.priority_aging_ms"));
}

// The spec's priority_aging_ms reaches the queue, at creation and by UpdateQueue (a fake clock:
// nothing here waits for time to pass).
TEST(PriorityServiceTest, TheSpecsAgingHandsOutAKeyThatWaitedTheBoundFirst) {
  FakeClock clock;
  QueueServer s(QueueServer::DefaultClusterLookups([](absl::string_view) { return nullptr; }),
                {.clock = &clock});
  v1::QueueSpec spec = Spec("q");
  spec.set_priority_aging_ms(10000);
  ASSERT_TRUE(s.CreateQueue(spec).ok());
  ASSERT_TRUE(Call(s, "q", Add("old", -100)).ok());
  clock.Advance(absl::Seconds(5));
  ASSERT_TRUE(Call(s, "q", Add("new-1")).ok());
  ASSERT_TRUE(Call(s, "q", Add("new-2")).ok());
  clock.Advance(absl::Seconds(5));  // "old" has waited 10 s, the bound
  {
    WorkerStream w(s.work(), "q", 1);
    ASSERT_NE(w.ReadStarted(), "");
    EXPECT_THAT(w.TakePriorities(3),
                ElementsAre(Pair("old", -100), Pair("new-1", 0), Pair("new-2", 0)));
    // Ends once the outcomes sent are applied (a cancel could give the last key back).
    ASSERT_TRUE(w.Drain());
    EXPECT_TRUE(w.AwaitEnd().ok());
  }
  // A longer bound from UpdateQueue: the same wait no longer jumps the line.
  spec.set_priority_aging_ms(60000);
  ASSERT_TRUE(s.UpdateQueue(spec).ok());
  ASSERT_TRUE(Call(s, "q", Add("old", -100)).ok());
  clock.Advance(absl::Seconds(5));
  ASSERT_TRUE(Call(s, "q", Add("new-1")).ok());
  clock.Advance(absl::Seconds(5));
  WorkerStream w(s.work(), "q", 1);
  ASSERT_NE(w.ReadStarted(), "");
  EXPECT_THAT(w.TakePriorities(2), ElementsAre(Pair("new-1", 0), Pair("old", -100)));
}

TEST(PriorityServiceTest, DepthByPriorityHasASeriesForEachOfTheFirstEightPrioritiesThenOther) {
  MetricsRegistry metrics;
  QueueServer s(QueueServer::DefaultClusterLookups([](absl::string_view) { return nullptr; }),
                {.metrics = &metrics});
  ASSERT_TRUE(s.CreateQueue(Spec("q")).ok());
  // 100 distinct priorities: 8 series and "other", whatever a client sends.
  for (int p = 0; p < 100; ++p) {
    ASSERT_TRUE(Call(s, "q", Add(absl::StrCat("k", p), p)).ok());
  }
  ASSERT_TRUE(Call(s, "q", Add("k100", 99)).ok());
  s.registry().UpdateMetrics();
  const std::string text = metrics.Render();
  size_t series = 0;
  for (size_t at = text.find("informerd_queue_depth_by_priority{"); at != std::string::npos;
       at = text.find("informerd_queue_depth_by_priority{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 9u) << text;
  // The first eight priorities the queue saw at a scrape are the highest ones waiting then.
  EXPECT_THAT(text, HasSubstr("informerd_queue_depth_by_priority{name=\"q\",priority=\"99\"} 2"));
  EXPECT_THAT(text, HasSubstr("informerd_queue_depth_by_priority{name=\"q\",priority=\"92\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("informerd_queue_depth_by_priority{name=\"q\",priority=\"other\"} 92"));
  // QueueState lists at most 64 entries, the lowest summed into the last.
  v1::QueueState st = s.State("q");
  ASSERT_EQ(st.depth_by_priority_size(), 64);
  EXPECT_EQ(st.depth_by_priority(0).priority(), 99);
  EXPECT_EQ(st.depth_by_priority(0).depth(), 2u);
  EXPECT_EQ(st.depth_by_priority(63).priority(), 36);
  EXPECT_EQ(st.depth_by_priority(63).depth(), 37u);  // 36 .. 0
  // Deleting the queue removes its series.
  grpc::ClientContext ctx;
  v1::DeleteQueueRequest del;
  del.set_queue("q");
  v1::DeleteQueueResponse resp;
  ASSERT_TRUE(s.queues().DeleteQueue(&ctx, del, &resp).ok());
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("informerd_queue_depth_by_priority")));
}

}  // namespace
}  // namespace informerd::service
