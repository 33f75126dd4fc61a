// Eventually: a test's wait for a condition another thread or process makes true.
//
//   ASSERT_TRUE(Eventually([&] { return informer->HasSynced(); }));
//   EXPECT_TRUE(Eventually([&] { return Status().syncs > 1; }, absl::Seconds(10)));
//
// Checks `pred` until it holds (true) or `timeout` passes (false). It yields between checks for
// the first millisecond — most conditions in-process settle that fast — and then sleeps a
// millisecond between checks, so that a predicate that talks to another process (an HTTP GET, a
// gRPC call) is not run in a tight loop.
#ifndef INFORMERD_BASE_EVENTUALLY_H_
#define INFORMERD_BASE_EVENTUALLY_H_

#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace informerd {

template <typename Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  while (!pred()) {
    const absl::Time now = absl::Now();
    if (now > deadline) return false;
    if (now - start < absl::Milliseconds(1)) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  return true;
}

}  // namespace informerd

#endif  // INFORMERD_BASE_EVENTUALLY_H_
