#include "server/informer/field_selector.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/informer/selector_limits.h"

namespace informerd::informer {
namespace {

// Splits on commas that are not escaped.
std::vector<absl::string_view> SplitTerms(absl::string_view s) {
  std::vector<absl::string_view> terms;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == ',') {
      terms.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  terms.push_back(s.substr(start));
  return terms;
}

std::string Escape(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == ',' || c == '=') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

absl::StatusOr<FieldSelector> FieldSelector::Parse(absl::string_view selector) {
  FieldSelector result;
  if (selector.empty()) return result;
  if (selector.size() > kMaxSelectorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("field selector ", QuotedSelector(selector),
                                                   ": at most ", kMaxSelectorBytes, " bytes"));
  }
  size_t terms = 0;
  for (absl::string_view term : SplitTerms(selector)) {
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("field selector ", QuotedSelector(selector),
                                                     ": term ", QuotedSelector(term), ": ", what));
    };
    if (++terms > kMaxSelectorTerms) {
      return error(absl::StrCat("at most ", kMaxSelectorTerms, " terms"));
    }
    // The first unescaped operator: "!=", "==" or "=" (apimachinery's splitTerm).
    size_t op_pos = absl::string_view::npos;
    size_t op_len = 0;
    bool negated = false;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term[i] == '\\') {
        ++i;
        continue;
      }
      absl::string_view rest = term.substr(i);
      if (absl::StartsWith(rest, "!=")) {
        op_len = 2;
        negated = true;
      } else if (absl::StartsWith(rest, "==")) {
        op_len = 2;
      } else if (absl::StartsWith(rest, "=")) {
        op_len = 1;
      } else {
        continue;
      }
      op_pos = i;
      break;
    }
    if (op_pos == absl::string_view::npos) return error("expected '=', '==' or '!='");
    absl::string_view field = term.substr(0, op_pos);
    absl::string_view raw_value = term.substr(op_pos + op_len);
    if (field.empty()) return error("the field name is empty");
    std::string value;
    for (size_t i = 0; i < raw_value.size(); ++i) {
      if (raw_value[i] != '\\') {
        value.push_back(raw_value[i]);
        continue;
      }
      if (i + 1 >= raw_value.size()) return error("the value ends in a lone '\\'");
      const char next = raw_value[++i];
      if (next != '\\' && next != ',' && next != '=') {
        return error(absl::StrCat("invalid escape sequence '\\", absl::string_view(&next, 1),
                                  "' in the value"));
      }
      value.push_back(next);
    }
    absl::StatusOr<FieldPath> path = FieldPath::Parse(field);
    if (!path.ok()) return error(path.status().message());
    result.terms_.push_back(Term{*std::move(path), negated, std::move(value)});
  }
  return result;
}

bool FieldSelector::Matches(const client::Object& object) const {
  for (const Term& term : terms_) {
    bool found = false;
    bool equal = false;
    term.field.Values(object, [&](absl::string_view v) {
      if (!found) equal = v == term.value;
      found = true;
    });
    if (!found) equal = term.value.empty();  // a missing field reads as ""
    if (equal == term.negated) return false;
  }
  return true;
}

const std::string* FieldSelector::RequiredNamespace() const {
  for (const Term& term : terms_) {
    if (!term.negated && term.field.text() == "metadata.namespace") return &term.value;
  }
  return nullptr;
}

std::string FieldSelector::ToString() const {
  std::vector<std::string> parts;
  for (const Term& term : terms_) {
    parts.push_back(absl::StrCat(term.field.text(), term.negated ? "!=" : "=", Escape(term.value)));
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace informerd::informer
