// The threads every informer of the process shares, so that informers cost no threads of their
// own (docs/architecture.md, "Threads"):
//   * the processing executor runs each informer's FIFO consumer — deltas applied to the cache
//     and handed to its listeners — as one SerialTask per informer, so one informer's changes
//     stay in order while any number of informers share as many threads as there are cores;
//   * a reflector executor runs each reflector's steps — deciding what to request next, and
//     the list requests themselves, which block until their page arrives. They get threads of
//     their own so that a slow API server delays only lists, never the processing of events.
//     The daemon gives each cluster its own (service/clusters.h), so that a hung API server
//     delays only its own cluster's lists; ReflectorExecutor() is the one for everything else.
// Watch streams need no thread at all: the cluster's transport delivers them (client/transport.h).
#ifndef INFORMERD_SERVER_INFORMER_INFORMER_THREADS_H_
#define INFORMERD_SERVER_INFORMER_INFORMER_THREADS_H_

#include "base/executor.h"

namespace informerd::informer {

// Created on first use, never destroyed. One per process.
Executor* ProcessingExecutor();
Executor* ReflectorExecutor();

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_INFORMER_THREADS_H_
