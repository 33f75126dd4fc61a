// Pods as the benchmarks generate them, deterministically: realistic Pods (labels, annotations,
// owner reference, managedFields, containers with env, ports, resources, probes and mounts,
// volumes, tolerations, status with conditions and container statuses) of any size, and a small
// Pod of about 1 KiB. Shared by bench/watch_decode_benchmark.cc and bench/store_benchmark.cc.
#ifndef INFORMERD_BENCH_PODS_H_
#define INFORMERD_BENCH_PODS_H_

#include <cstddef>
#include <string>

namespace informerd::bench {

// Pod `i` at resourceVersion `rv`, with `containers` containers of `envs` env entries each.
std::string Pod(int i, int rv, int containers, int envs);
// A small pod (about 1 KiB): what a minimal Deployment's pod looks like without managedFields.
std::string SmallPod(int i, int rv);
// A pod of about `target` bytes (managedFields included): containers and env entries grow with it.
std::string SizedPod(int i, int rv, size_t target);

}  // namespace informerd::bench

#endif  // INFORMERD_BENCH_PODS_H_
