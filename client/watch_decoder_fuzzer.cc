// libFuzzer target: the watch decoder must turn any bytes, cut into chunks anywhere, into events
// or a clean error — never a crash, a hang or a sanitizer report.
//
// Input: the first byte picks a chunk length (1..128) and, in its top bit, whether managedFields
// are cut while decoding; the rest is the response body.
// Built by tools/fuzz (clang, -fsanitize=fuzzer,address,undefined); also run over its seed
// corpus by //client:watch_decoder_fuzzer_test under Bazel.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/watch_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using informerd::client::WatchDecoder;
  using informerd::client::WatchEvent;
  if (size == 0) return 0;
  const size_t chunk = 1 + (data[0] & 0x7f);
  const bool drop_managed_fields = (data[0] & 0x80) != 0;
  absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto decoder =
      WatchDecoder::Create({.max_event_bytes = 1 << 20, .drop_managed_fields = drop_managed_fields})
          .value();
  std::vector<WatchEvent> events;
  absl::Status status;
  for (size_t at = 0; at < body.size() && status.ok(); at += chunk) {
    status = decoder->Feed(body.substr(at, chunk), &events);
  }
  if (status.ok()) status = decoder->Finish();
  // Touch everything an event carries.
  size_t sum = 0;
  for (const WatchEvent& e : events) {
    sum += e.object->json().size() + e.object->key().size() + e.object->labels().size() +
           e.object->owner_references().size() + (e.object->controller_ref() != nullptr);
    for (const auto& label : e.object->labels()) sum += label.key.size() + label.value.size();
    for (const auto& a : e.object->annotations()) sum += a.key.size() + a.value.size();
    for (absl::string_view f : e.object->finalizers()) sum += f.size();
    sum += e.object->creation_timestamp().size();
  }
  return sum == static_cast<size_t>(-1) ? 1 : 0;
}
