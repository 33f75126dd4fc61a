// JSON writing helpers for the request bodies informerd builds by hand (reviews, Leases, stored
// queue specs): strings escaped as RFC 8259 asks.
//
//   std::string body = R"({"user":)";
//   AppendJsonString(&body, user);          // "al\"ice" -> "al\\\"ice"
//   body.append(R"(,"groups":)");
//   AppendJsonStrings(&body, groups);       // ["a","b"]
//
// Thread safety: pure functions.
#ifndef INFORMERD_BASE_JSON_WRITER_H_
#define INFORMERD_BASE_JSON_WRITER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace informerd {

// `s` as a JSON string: quotes, backslashes and control characters escaped; other bytes, UTF-8
// included, as they are.
void AppendJsonString(std::string* out, absl::string_view s);

// `values` as a JSON array of strings.
void AppendJsonStrings(std::string* out, const std::vector<std::string>& values);

}  // namespace informerd

#endif  // INFORMERD_BASE_JSON_WRITER_H_
