// Bounds of label and field selectors, shared by both parsers: a selector comes from a gRPC
// client (List, Watch, EnsureInformer, queue sources), so its size bounds the CPU and memory one
// request can make the daemon spend parsing and matching it. Kubernetes sets no such limit, but
// its selectors travel in a URL, which proxies and the API server cut at a few KiB.
//
//   if (selector.size() > kMaxSelectorBytes) return TooLong(...);
//   absl::StrCat("label selector ", QuotedSelector(selector), ": ...");
//
// Thread safety: constants and a pure function.
#ifndef INFORMERD_SERVER_INFORMER_SELECTOR_LIMITS_H_
#define INFORMERD_SERVER_INFORMER_SELECTOR_LIMITS_H_

#include <cstddef>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace informerd::informer {

// Bytes of one selector's text, and its terms (requirements), at most.
inline constexpr size_t kMaxSelectorBytes = 64 << 10;
inline constexpr size_t kMaxSelectorTerms = 1000;

// The selector in quotes for an error message: at most its first 64 bytes, escaped, with
// "... (N bytes)" after a longer one, so that an error about a huge selector stays small.
inline std::string QuotedSelector(absl::string_view selector) {
  constexpr size_t kShown = 64;
  if (selector.size() <= kShown) return absl::StrCat("\"", absl::CHexEscape(selector), "\"");
  return absl::StrCat("\"", absl::CHexEscape(selector.substr(0, kShown)), "...\" (",
                      selector.size(), " bytes)");
}

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_SELECTOR_LIMITS_H_
