// LabelSelector: a parsed Kubernetes label selector (k8s.io/apimachinery/pkg/labels), in its full
// string syntax, matched against an object's labels.
//
//   LabelSelector s = LabelSelector::Parse("app in (web,api),tier!=db,!canary").value();
//   if (s.Matches(*pod)) ...
//
// Syntax: requirements separated by commas, all of which must hold.
//   key=value, key==value     the label is set to value
//   key!=value                the label is not set to value (or not set at all)
//   key in (v1,v2,...)        the label is set to one of the values
//   key notin (v1,v2,...)     the label is not set to any of the values (or not set at all)
//   key                       the label is set
//   !key                      the label is not set
//   key>N, key<N              the label is set to an integer greater / less than N
// Keys are qualified names ([prefix/]name: a DNS subdomain prefix of at most 253 characters and
// a name of at most 63 of [A-Za-z0-9-_.], starting and ending alphanumeric); values are empty or
// at most 63 such characters. The empty selector matches everything.
//
// Parse errors are InvalidArgument naming the offending part, e.g.
//   label selector "app in (web": missing ')' after the values of "app"
//
// Thread safety: immutable after Parse; Matches may be called from any number of threads.
#ifndef INFORMERD_SERVER_INFORMER_LABEL_SELECTOR_H_
#define INFORMERD_SERVER_INFORMER_LABEL_SELECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"

namespace informerd::informer {

class LabelSelector {
 public:
  enum class Operator {
    kEquals,        // = and ==
    kNotEquals,     // !=
    kIn,
    kNotIn,
    kExists,        // key
    kDoesNotExist,  // !key
    kGreaterThan,
    kLessThan,
  };
  struct Requirement {
    std::string key;
    Operator op = Operator::kExists;
    std::vector<std::string> values;  // sorted, unique
    int64_t number = 0;               // kGreaterThan / kLessThan
  };

  // Matches everything.
  LabelSelector() = default;
  static absl::StatusOr<LabelSelector> Parse(absl::string_view selector);

  bool Matches(const client::Object& object) const;
  // Whether it matches everything.
  bool Empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }
  // The canonical form (requirements sorted by key, as apimachinery prints them).
  std::string ToString() const;

 private:
  std::vector<Requirement> requirements_;
};

// Validation shared with other selectors: "" when valid, else why not.
std::string InvalidLabelKeyReason(absl::string_view key);
std::string InvalidLabelValueReason(absl::string_view value);

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_LABEL_SELECTOR_H_
