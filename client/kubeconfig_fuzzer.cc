// libFuzzer target: the kubeconfig parser must turn any bytes into a Kubeconfig or a clean
// error. RestConfigFromKubeconfig is not called: it reads the files the input names.
//
// Built by tools/fuzz; also run over its seed corpus by //client:kubeconfig_fuzzer_test.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "client/kubeconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using informerd::client::Kubeconfig;
  absl::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Kubeconfig> parsed = informerd::client::ParseKubeconfig(yaml, "/fuzz/config");
  if (parsed.ok()) {
    Kubeconfig merged;
    informerd::client::MergeKubeconfig(*parsed, &merged);
    informerd::client::MergeKubeconfig(*std::move(parsed), &merged);
  }
  return 0;
}
