// The daemon's SourceLookups (queue_source.h): informers from the InformerRegistry, with the
// cluster their keys name, and owner kinds' scope from the cluster's discovery.
//
//   QueueRegistry queues(InformerSourceLookups(&informers, &clusters), {...});
//
// Thread safety: the lookups may be called from any thread; `informers` and `clusters` must
// outlive them.
#ifndef INFORMERD_SERVER_SERVICE_SOURCE_LOOKUPS_H_
#define INFORMERD_SERVER_SERVICE_SOURCE_LOOKUPS_H_

#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/service/queue_source.h"

namespace informerd::service {

SourceLookups InformerSourceLookups(InformerRegistry* informers, Clusters* clusters);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_SOURCE_LOOKUPS_H_
