// Executor: a fixed set of threads that runs posted tasks, and SerialTask: one function run on an
// executor whenever it is scheduled, never twice at once — the daemon's way of giving many
// components (informers, reflectors) work that stays in order without a thread each.
//
//   Executor pool({.threads = 2, .name = "informers"});
//   SerialTask drain(&pool, [&] { while (auto item = TryPop()) Process(*item); });
//   drain.Schedule();   // from any thread, as often as work arrives
//   drain.Stop();       // no run starts after this; waits for one in progress
//
// A SerialTask coalesces: Schedule while a run is queued does nothing more, and Schedule while it
// runs makes it run once more after (so work that arrives during a run is never missed). Runs
// of one SerialTask happen one after another with a happens-before edge between them, so its
// state needs no lock of its own against itself. A run should do a bounded amount of work and
// Schedule again when there is more, so that the tasks sharing the threads take turns.
//
// Tasks must not block for long: the threads are few and shared. A component whose work
// blocks (a list request) gets its own executor, so its waits delay only its own kind of work.
//
// Thread safety: every method may be called from any thread, including from a task.
#ifndef INFORMERD_BASE_EXECUTOR_H_
#define INFORMERD_BASE_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "base/mutex.h"

namespace informerd {

class Executor {
 public:
  struct Options {
    // At least 1.
    int threads = 2;
    // Thread names (pthread, up to 15 characters): "<name>-<index>".
    std::string name = "executor";
  };

  explicit Executor(Options options);
  // Runs every task already posted, then joins the threads. Tasks posted meanwhile run too.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(absl::AnyInvocable<void() &&> task);

  int threads() const { return static_cast<int>(threads_.size()); }
  // Tasks posted and not yet started.
  size_t queued() const;
  // Whether the caller is one of this executor's threads.
  bool OnExecutorThread() const;

 private:
  void Run();

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class SerialTask {
 public:
  // `executor` must outlive this task.
  SerialTask(Executor* executor, absl::AnyInvocable<void()> run);
  // Stops.
  ~SerialTask();
  SerialTask(const SerialTask&) = delete;
  SerialTask& operator=(const SerialTask&) = delete;

  // Makes the function run soon (on the executor), or once more after the run in progress.
  // Ignored once stopped.
  void Schedule();
  // No run starts after this returns; a run in progress on another thread is waited for. From
  // within the run itself it returns at once (the run is the caller's own), and no run follows.
  void Stop();

 private:
  // Shared with the closures queued on the executor, which may outlive this object: a closure
  // that starts after Stop finds `stopped` and does nothing.
  struct State {
    Mutex mu;
    enum class Phase { kIdle, kQueued, kRunning, kRunningAgain };
    Phase phase ABSL_GUARDED_BY(mu) = Phase::kIdle;
    bool stopped ABSL_GUARDED_BY(mu) = false;
    std::thread::id runner ABSL_GUARDED_BY(mu);
    absl::AnyInvocable<void()> run;
  };
  static void RunOnce(Executor* executor, const std::shared_ptr<State>& state);

  Executor* const executor_;
  const std::shared_ptr<State> state_;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_EXECUTOR_H_
