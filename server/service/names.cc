// Names: see names.h.
#include "server/service/names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace informerd::service {
namespace {

bool IsLowerAlnum(char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); }

// The name as an error message shows it: quoted, escaped, and cut after 64 characters, so that
// a client's megabyte of name is not sent back (or logged) whole.
std::string Shown(absl::string_view name) {
  constexpr size_t kShown = 64;
  if (name.size() <= kShown) return absl::StrCat("\"", absl::CHexEscape(name), "\"");
  return absl::StrCat("\"", absl::CHexEscape(name.substr(0, kShown)), "\"... (", name.size(),
                      " characters)");
}

// The checks both rules share; `dots`: '.' separates labels.
std::string NameError(absl::string_view name, size_t max_size, bool dots) {
  if (name.empty()) return "required";
  if (name.size() > max_size) {
    return absl::StrCat(Shown(name), ": at most ", max_size, " characters");
  }
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '-' && !(dots && c == '.')) {
      return absl::StrCat(Shown(name), ": only lowercase letters, digits",
                          dots ? ", '-' and '.'" : " and '-'");
    }
  }
  // Every label (the whole name without dots) starts and ends with a letter or digit.
  for (size_t i = 0; i < name.size(); ++i) {
    const bool label_start = i == 0 || name[i - 1] == '.';
    const bool label_end = i + 1 == name.size() || name[i + 1] == '.';
    if ((label_start || label_end) && !IsLowerAlnum(name[i])) {
      return absl::StrCat(Shown(name), ": must start and end with a letter or digit",
                          dots ? ", and so must each part between dots" : "");
    }
  }
  return "";
}

}  // namespace

std::string Dns1123LabelError(absl::string_view name, size_t max_size) {
  return NameError(name, max_size, /*dots=*/false);
}

std::string Dns1123SubdomainError(absl::string_view name, size_t max_size) {
  return NameError(name, max_size, /*dots=*/true);
}

}  // namespace informerd::service
