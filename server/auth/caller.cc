#include "server/auth/caller.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace informerd::auth {
namespace {

// Appends `s` length-prefixed, so that no choice of names makes two identities' keys equal.
void AppendField(std::string* out, const std::string& s) {
  absl::StrAppend(out, s.size(), ":", s, ";");
}

// Interned callers kept without a user beyond this many are dropped on the next Intern.
constexpr size_t kPruneAbove = 4096;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string Identity::PrincipalKey() const {
  std::string key;
  AppendField(&key, user);
  AppendField(&key, uid);
  absl::StrAppend(&key, groups.size(), "g");
  for (const std::string& g : groups) AppendField(&key, g);
  return key;
}

std::string Identity::Key() const {
  std::string key = PrincipalKey();
  absl::StrAppend(&key, extra.size(), "x");
  for (const auto& [k, values] : extra) {
    AppendField(&key, k);
    absl::StrAppend(&key, values.size(), "v");
    for (const std::string& v : values) AppendField(&key, v);
  }
  return key;
}

std::string Caller::Describe() const {
  std::string out = absl::StrCat("user \"", identity.user, "\"");
  if (!identity.groups.empty()) {
    absl::StrAppend(&out, " (groups: ", absl::StrJoin(identity.groups, ", "), ")");
  }
  return out;
}

bool Principal::Idle() {
  MutexLock lock(&mu);
  return in_flight.load() == 0 && streams.load() == 0 && informers.empty() && queues.empty();
}

std::shared_ptr<Caller> Callers::Intern(Identity identity) {
  std::string key = identity.Key();
  MutexLock lock(&mu_);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  if (by_key_.size() > kPruneAbove) {
    // Callers nobody holds; then principals no caller holds and that hold nothing themselves
    // (one that created an informer keeps its count, whoever forgot its callers).
    absl::erase_if(by_key_, [](const auto& kv) { return kv.second.use_count() == 1; });
    absl::erase_if(principals_, [](const auto& kv) {
      return kv.second.use_count() == 1 && kv.second->Idle();
    });
  }
  std::shared_ptr<Principal>& principal = principals_[identity.PrincipalKey()];
  if (principal == nullptr) principal = std::make_shared<Principal>();
  auto caller = std::make_shared<Caller>(next_id_++, std::move(identity), principal);
  by_key_.emplace(std::move(key), caller);
  return caller;
}

size_t Callers::principals() const {
  MutexLock lock(&mu_);
  return principals_.size();
}

Identity IdentityFromSubject(const std::string& subject) {
  Identity id;
  id.method = "certificate";
  // Split on unescaped ',' and '+' (multi-valued RDNs), then each part on its first '='.
  std::vector<std::string> parts;
  std::string current;
  for (size_t i = 0; i < subject.size(); ++i) {
    const char c = subject[i];
    if (c == '\\' && i + 1 < subject.size()) {
      const int hi = HexDigit(subject[i + 1]);
      const int lo = i + 2 < subject.size() ? HexDigit(subject[i + 2]) : -1;
      if (hi >= 0 && lo >= 0) {
        current.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
      } else {
        current.push_back(subject[++i]);
      }
      continue;
    }
    if (c == ',' || c == '+') {
      parts.push_back(std::move(current));
      current.clear();
      continue;
    }
    current.push_back(c);
  }
  parts.push_back(std::move(current));
  // RFC 2253 writes the last RDN first: read them in the certificate's order, so that groups
  // keep the order of its O values (as kube-apiserver lists them).
  std::reverse(parts.begin(), parts.end());
  for (std::string& part : parts) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos) continue;
    std::string type(absl::StripAsciiWhitespace(part.substr(0, eq)));
    std::string value = part.substr(eq + 1);
    if (absl::EqualsIgnoreCase(type, "CN") && id.user.empty()) {
      id.user = std::move(value);
    } else if (absl::EqualsIgnoreCase(type, "O")) {
      id.groups.push_back(std::move(value));
    }
  }
  return id;
}

}  // namespace informerd::auth
