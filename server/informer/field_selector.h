// FieldSelector: a parsed Kubernetes field selector (k8s.io/apimachinery/pkg/fields), matched
// against an object's fields.
//
//   FieldSelector s = FieldSelector::Parse("metadata.namespace!=kube-system,spec.nodeName=n1").value();
//   if (s.Matches(*pod)) ...
//
// Syntax: terms separated by commas, all of which must hold: `field=value`, `field==value`,
// `field!=value`. In values, `\,`, `\=` and `\\` escape a comma, an equals sign and a backslash.
// A field is a dotted path (field_path.h); a missing field has the value "" (so `spec.nodeName=`
// matches unscheduled pods, as on the API server). metadata.name and metadata.namespace are read
// from the parsed metadata; other paths from the JSON. The empty selector matches everything.
//
// Parse errors are InvalidArgument naming the offending term.
//
// Thread safety: immutable after Parse; Matches may be called from any number of threads.
#ifndef INFORMERD_SERVER_INFORMER_FIELD_SELECTOR_H_
#define INFORMERD_SERVER_INFORMER_FIELD_SELECTOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"
#include "server/informer/field_path.h"

namespace informerd::informer {

class FieldSelector {
 public:
  struct Term {
    FieldPath field;
    bool negated = false;  // !=
    std::string value;     // unescaped
  };

  // Matches everything.
  FieldSelector() = default;
  static absl::StatusOr<FieldSelector> Parse(absl::string_view selector);

  bool Matches(const client::Object& object) const;
  bool Empty() const { return terms_.empty(); }
  const std::vector<Term>& terms() const { return terms_; }
  // The value a `metadata.namespace=` term requires, if there is such a term (lets a lister
  // use the namespace index).
  const std::string* RequiredNamespace() const;
  // Canonical form, values escaped again.
  std::string ToString() const;

 private:
  std::vector<Term> terms_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_FIELD_SELECTOR_H_
