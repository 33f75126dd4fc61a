// Randomized convergence against testing/apiserver: round after round of random creates, updates,
// deletes and re-creations (same name, new uid) with a random fault injected — for the informers'
// requests (410 at list/watch start/mid-watch, 429, 5xx, truncation, garbage, clean closes,
// stalls) or for everyone (compaction, connection resets, refused connections). After each round
// settles, every informer's cache equals the server's state (same keys, uids and
// resourceVersions), and so does the view of every handler, each of which checked that it never
// saw a key's changes out of order.
//
// Two informers run side by side (one syncing by paginated list, one by streaming list), each with
// a normal handler and one with a tiny buffer that keeps overflowing into re-snapshots.
//
// Rounds: INFORMERD_CONVERGENCE_ROUNDS (default 6, a quick run for `make test`; `make soak` runs
// hundreds) and INFORMERD_CONVERGENCE_OPS per round (default 30). INFORMERD_CONVERGENCE_SEED fixes
// the random sequence (default: time-based, printed so that a failure can be replayed).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/api_error.h"
#include "gtest/gtest.h"
#include "server/informer/apiserver_fixture.h"
#include "server/informer/shared_informer.h"

namespace informerd::informer {
namespace {

using testing::ApiServerFixture;
using testing::ObjectState;
using testing::State;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out = 0;
  return v != nullptr && absl::SimpleAtoi(v, &out) ? out : fallback;
}

// The fake server's resourceVersions are decimal counters: order checks may compare them (the
// informer itself never does).
int64_t Rv(const ObjectPtr& o) {
  int64_t rv = 0;
  EXPECT_TRUE(absl::SimpleAtoi(o->resource_version(), &rv)) << o->key();
  return rv;
}

// Keeps the handler's view and fails on any notification that goes back in time for a key.
class OrderChecker : public ResourceEventHandler {
 public:
  explicit OrderChecker(std::string name) : name_(std::move(name)) {}

  void OnAdd(const ObjectPtr& o, bool) override {
    MutexLock lock(&mu_);
    const std::string key(o->key());
    if (view_.contains(key)) Violation(absl::StrCat("add of ", key, " which it already has"));
    view_[key] = {std::string(o->uid()), Rv(o)};
  }
  void OnUpdate(const ObjectPtr& old_object, const ObjectPtr& o) override {
    MutexLock lock(&mu_);
    const std::string key(o->key());
    auto it = view_.find(key);
    if (it == view_.end()) {
      Violation(absl::StrCat("update of ", key, " which it does not have"));
    } else if (it->second.uid == o->uid() && Rv(o) < it->second.rv) {
      Violation(absl::StrCat(key, " went back from ", it->second.rv, " to ", Rv(o)));
    }
    view_[key] = {std::string(o->uid()), Rv(o)};
  }
  void OnDelete(const ObjectPtr& o, bool) override {
    MutexLock lock(&mu_);
    const std::string key(o->key());
    auto it = view_.find(key);
    if (it == view_.end()) {
      Violation(absl::StrCat("delete of ", key, " which it does not have"));
      return;
    }
    if (it->second.uid == o->uid() && Rv(o) < it->second.rv) {
      Violation(absl::StrCat(key, " deleted at ", Rv(o), " after ", it->second.rv));
    }
    view_.erase(it);
  }
  void OnResnapshot(size_t) override {
    MutexLock lock(&mu_);
    ++resnapshots_;
  }

  State view() {
    MutexLock lock(&mu_);
    State state;
    for (const auto& [key, v] : view_) state[key] = {v.uid, absl::StrCat(v.rv)};
    return state;
  }
  std::vector<std::string> violations() {
    MutexLock lock(&mu_);
    return violations_;
  }
  int resnapshots() {
    MutexLock lock(&mu_);
    return resnapshots_;
  }
  const std::string& name() const { return name_; }

 private:
  struct Seen {
    std::string uid;
    int64_t rv = 0;
  };
  void Violation(std::string what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (violations_.size() < 20) violations_.push_back(absl::StrCat(name_, ": ", what));
  }

  const std::string name_;
  Mutex mu_;
  std::map<std::string, Seen> view_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
  int resnapshots_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Subject {
  std::unique_ptr<SharedInformer> informer;
  std::vector<std::shared_ptr<OrderChecker>> checkers;
};

// Retries a change while the server refuses connections; a change that raced with another
// (already exists, gone) is fine.
void Change(const std::function<absl::Status()>& change) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool logged = false;
  for (;;) {
    absl::Status s = change();
    if (s.ok() || client::IsAlreadyExists(s) || client::IsNotFound(s) || client::IsConflict(s)) {
      return;
    }
    if (!logged) {
      std::printf("retrying a change after: %s\n", s.ToString().c_str());
      logged = true;
    }
    if (absl::Now() > deadline) {
      ADD_FAILURE() << "change kept failing: " << s;
      return;
    }
    std::this_thread::yield();
  }
}

TEST(ConvergenceTest, CachesAndHandlersConvergeUnderRandomChangesAndFaults) {
  const int64_t rounds = EnvInt("INFORMERD_CONVERGENCE_ROUNDS", 6);
  const int64_t ops = EnvInt("INFORMERD_CONVERGENCE_OPS", 30);
  const uint64_t seed = static_cast<uint64_t>(
      EnvInt("INFORMERD_CONVERGENCE_SEED", absl::ToUnixNanos(absl::Now()) & 0xffffffff));
  std::printf("convergence: %lld rounds of %lld changes, seed %llu\n",
              static_cast<long long>(rounds), static_cast<long long>(ops),
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);

  ApiServerFixture fixture(absl::StrCat("convergence-", seed % 1000000));
  ASSERT_TRUE(fixture.Seed(60, 300).ok());

  std::vector<Subject> subjects;
  for (bool streaming : {false, true}) {
    Subject subject;
    subject.informer = fixture.NewInformer({.name = streaming ? "streaming" : "listing",
                                            .use_streaming_list = streaming,
                                            .seed = seed + streaming});
    for (size_t buffer : {size_t{0}, size_t{4}}) {
      auto checker = std::make_shared<OrderChecker>(
          absl::StrCat(streaming ? "streaming" : "listing", buffer ? "/tiny-buffer" : "/normal"));
      ASSERT_TRUE(subject.informer
                      ->AddEventHandler(checker, {.name = checker->name(), .buffer_size = buffer})
                      .ok());
      subject.checkers.push_back(checker);
    }
    ASSERT_TRUE(subject.informer->Start().ok());
    subjects.push_back(std::move(subject));
  }

  const std::string ns = fixture.ns();
  const std::vector<std::string> request_faults = {
      R"("type":"gone","verb":"watch","afterEvents":%d)",
      R"("type":"gone","verb":"watch","mode":"status")",
      R"("type":"gone","verb":"list")",
      R"("type":"too-many-requests","verb":"watch","retryAfterSeconds":1)",
      R"("type":"too-many-requests","verb":"list","retryAfterSeconds":1)",
      R"("type":"internal-error","verb":"watch","afterEvents":%d)",
      R"("type":"truncate","verb":"watch","afterEvents":%d)",
      R"("type":"garbage","verb":"watch","afterEvents":%d)",
      R"("type":"close","verb":"watch","afterEvents":%d)",
      R"("type":"stall","verb":"watch","afterEvents":%d)",
  };
  const std::vector<std::string> immediate_faults = {
      absl::StrCat(R"({"type":"close-watches","namespace":")", ns, R"("})"),
      R"({"type":"compact","resource":"configmaps"})",
      R"({"type":"reset-connections"})",
      R"({"type":"refuse","durationMs":300})",
  };
  int created = 0;
  for (int64_t round = 0; round < rounds; ++round) {
    // A fault: for the informers' next requests, or for everyone now.
    const uint64_t pick = rng() % (request_faults.size() + immediate_faults.size() + 2);
    std::string fault_description = "none";
    if (pick < request_faults.size()) {
      std::string fault = request_faults[pick];
      const size_t d = fault.find("%d");
      if (d != std::string::npos) fault.replace(d, 2, absl::StrCat(rng() % 8));
      fault_description = fault;
      Change([&] { return fixture.Fault(fault); });
      Change([&] { return fixture.Immediate(immediate_faults[0]); });  // the next watch takes it
    } else if (pick < request_faults.size() + immediate_faults.size()) {
      fault_description = immediate_faults[pick - request_faults.size()];
      Change([&] { return fixture.Immediate(fault_description); });
    }
    // Random changes.
    absl::StatusOr<State> state;
    Change([&] {
      state = fixture.ServerState();
      return state.status();
    });
    std::vector<std::string> names;
    for (const auto& [key, s] : *state) names.push_back(key.substr(key.find('/') + 1));
    for (int64_t i = 0; i < ops; ++i) {
      const uint64_t op = rng() % 10;
      if (names.empty() || op < 2) {
        const std::string name = absl::StrCat("c-", created++);
        Change([&] { return fixture.Create(name); });
        names.push_back(name);
      } else if (op < 7) {
        const std::string& name = names[rng() % names.size()];
        Change([&] { return fixture.Update(name); });
      } else if (op < 9) {
        const size_t j = rng() % names.size();
        Change([&] { return fixture.Delete(names[j]); });
        names.erase(names.begin() + j);
      } else {
        // Same name, new object (a new uid).
        const std::string& name = names[rng() % names.size()];
        Change([&] { return fixture.Delete(name); });
        Change([&] { return fixture.Create(name); });
      }
    }
    // Settle and compare.
    absl::StatusOr<State> want;
    Change([&] {
      want = fixture.ServerState();
      return want.status();
    });
    for (Subject& subject : subjects) {
      absl::Status converged = fixture.WaitConverged(*subject.informer);
      ASSERT_TRUE(converged.ok()) << "round " << round << " (fault " << fault_description
                                  << ", seed " << seed << "): " << converged;
      for (const auto& checker : subject.checkers) {
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        std::string difference;
        while (!(difference = testing::DescribeDifference(*want, checker->view())).empty() &&
               absl::Now() < deadline) {
          std::this_thread::yield();
        }
        ASSERT_EQ(difference, "") << checker->name() << " round " << round << " (fault "
                                  << fault_description << ", seed " << seed << ")";
        ASSERT_EQ(checker->violations(), std::vector<std::string>())
            << "round " << round << " (fault " << fault_description << ", seed " << seed << ")";
      }
    }
  }
  for (Subject& subject : subjects) {
    const ReflectorStatus status = subject.informer->reflector_status();
    std::printf("%s: %llu syncs (%llu streaming), %llu watches, %llu events, %llu stalls, "
                "%llu backoffs; tiny-buffer handler re-snapshots: %d\n",
                subject.informer->name().c_str(), static_cast<unsigned long long>(status.syncs),
                static_cast<unsigned long long>(status.streaming_syncs),
                static_cast<unsigned long long>(status.watches_started),
                static_cast<unsigned long long>(status.events),
                static_cast<unsigned long long>(status.stalls),
                static_cast<unsigned long long>(status.backoffs),
                subject.checkers[1]->resnapshots());
  }
}

}  // namespace
}  // namespace informerd::informer
