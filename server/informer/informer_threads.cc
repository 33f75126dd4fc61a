#include "server/informer/informer_threads.h"

#include <algorithm>
#include <thread>

namespace informerd::informer {

Executor* ProcessingExecutor() {
  static Executor* const executor = new Executor(
      {.threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency())),
       .name = "informers"});
  return executor;
}

Executor* ReflectorExecutor() {
  // Lists mostly wait for the network; four in flight keep the transport's connections busy
  // while the client-side rate limit (50 qps by default) is what paces a thousand informers.
  static Executor* const executor = new Executor({.threads = 4, .name = "reflectors"});
  return executor;
}

}  // namespace informerd::informer
