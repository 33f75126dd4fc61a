#include "base/executor.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd {

Executor::Executor(Options options) {
  const int n = std::max(1, options.threads);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Run(); });
    const std::string name = absl::StrCat(options.name, "-", i).substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

Executor::~Executor() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void Executor::Post(absl::AnyInvocable<void() &&> task) {
  MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  cv_.Signal();
}

size_t Executor::queued() const {
  MutexLock lock(&mu_);
  return tasks_.size();
}

bool Executor::OnExecutorThread() const {
  const std::thread::id self = std::this_thread::get_id();
  return std::any_of(threads_.begin(), threads_.end(),
                     [self](const std::thread& t) { return t.get_id() == self; });
}

void Executor::Run() {
  for (;;) {
    absl::AnyInvocable<void() &&> task;
    {
      MutexLock lock(&mu_);
      while (tasks_.empty() && !stopping_) cv_.Wait(&mu_);
      // Stopping: what is queued still runs (a task may post more; they run too).
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

// ---- SerialTask ----

SerialTask::SerialTask(Executor* executor, absl::AnyInvocable<void()> run)
    : executor_(executor), state_(std::make_shared<State>()) {
  state_->run = std::move(run);
}

SerialTask::~SerialTask() { Stop(); }

void SerialTask::Schedule() {
  {
    MutexLock lock(&state_->mu);
    if (state_->stopped) return;
    switch (state_->phase) {
      case State::Phase::kIdle:
        state_->phase = State::Phase::kQueued;
        break;
      case State::Phase::kRunning:
        state_->phase = State::Phase::kRunningAgain;
        return;
      case State::Phase::kQueued:
      case State::Phase::kRunningAgain:
        return;
    }
  }
  executor_->Post([executor = executor_, state = state_]() { RunOnce(executor, state); });
}

void SerialTask::RunOnce(Executor* executor, const std::shared_ptr<State>& state) {
  {
    MutexLock lock(&state->mu);
    if (state->stopped) return;
    state->phase = State::Phase::kRunning;
    state->runner = std::this_thread::get_id();
  }
  // Only this closure runs `run` now: the phase admits one queued closure at a time.
  state->run();
  bool again = false;
  {
    MutexLock lock(&state->mu);
    state->runner = std::thread::id();
    if (state->phase == State::Phase::kRunningAgain && !state->stopped) {
      // Back of the executor's queue rather than a loop here: other tasks get their turn.
      state->phase = State::Phase::kQueued;
      again = true;
    } else {
      state->phase = State::Phase::kIdle;
    }
  }
  if (again) executor->Post([executor, state]() { RunOnce(executor, state); });
}

void SerialTask::Stop() {
  MutexLock lock(&state_->mu);
  state_->stopped = true;
  if (state_->runner == std::this_thread::get_id()) return;  // from within the run
  state_->mu.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    return state_->phase != State::Phase::kRunning && state_->phase != State::Phase::kRunningAgain;
  });
}

}  // namespace informerd
