// Names: the rules for the names informerd accepts — Kubernetes' DNS-1123 label and subdomain
// rules, with a maximum size. Cluster names, namespaces, API versions, resource, index and queue
// names follow them; they appear in informer ids, metric labels and URLs.
//
//   if (std::string why = Dns1123LabelError(name); !why.empty()) return InvalidField("name", why);
//
// Each function returns "" for a valid name, else why not, quoting the name where it helps
// ("\"Web_1\": only lowercase letters, digits and '-'"), ready for InvalidField. An empty name is
// invalid ("required"): callers of optional fields test for "" first.
//
// Thread safety: pure functions.
#ifndef INFORMERD_SERVER_SERVICE_NAMES_H_
#define INFORMERD_SERVER_SERVICE_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace informerd::service {

// Kubernetes' limits: a label (a namespace, a cluster name) and a subdomain (an API group).
inline constexpr size_t kMaxDns1123LabelSize = 63;
inline constexpr size_t kMaxDns1123SubdomainSize = 253;

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most `max_size` characters.
std::string Dns1123LabelError(absl::string_view name, size_t max_size = kMaxDns1123LabelSize);

// A DNS-1123 subdomain: labels joined by '.' ([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*
// [a-z0-9])?)*), at most `max_size` characters in all.
std::string Dns1123SubdomainError(absl::string_view name,
                                  size_t max_size = kMaxDns1123SubdomainSize);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_NAMES_H_
