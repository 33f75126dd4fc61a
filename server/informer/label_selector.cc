#include "server/informer/label_selector.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/informer/selector_limits.h"

namespace informerd::informer {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])? — a label name or value.
bool IsQualifiedNamePart(absl::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// A DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', starting and ending alphanumeric.
bool IsDnsSubdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s) {
    if (!lower_alnum(c) && c != '-' && c != '.') return false;
  }
  return true;
}

constexpr char kNameRule[] =
    "must be 63 characters or less, consist of alphanumeric characters, '-', '_' or '.', and "
    "start and end with an alphanumeric character";

// ---- lexer ----

enum class Token {
  kEnd,
  kIdentifier,
  kNot,          // !
  kEquals,       // =
  kDoubleEquals, // ==
  kNotEquals,    // !=
  kGreater,      // >
  kLess,         // <
  kOpenParen,
  kCloseParen,
  kComma,
};

bool IsSpecial(char c) {
  return c == '!' || c == '=' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct Lexeme {
  Token token = Token::kEnd;
  absl::string_view text;
};

class Lexer {
 public:
  explicit Lexer(absl::string_view input) : input_(input) {}

  Lexeme Next() {
    while (pos_ < input_.size() && IsSpace(input_[pos_])) ++pos_;
    if (pos_ >= input_.size()) return {Token::kEnd, ""};
    const size_t start = pos_;
    const char c = input_[pos_];
    if (IsSpecial(c)) {
      ++pos_;
      const bool eq_next = pos_ < input_.size() && input_[pos_] == '=';
      Token t = Token::kEnd;
      switch (c) {
        case '!':
          t = eq_next ? Token::kNotEquals : Token::kNot;
          break;
        case '=':
          t = eq_next ? Token::kDoubleEquals : Token::kEquals;
          break;
        case '>':
          t = Token::kGreater;
          break;
        case '<':
          t = Token::kLess;
          break;
        case '(':
          t = Token::kOpenParen;
          break;
        case ')':
          t = Token::kCloseParen;
          break;
        case ',':
          t = Token::kComma;
          break;
      }
      if (t == Token::kNotEquals || t == Token::kDoubleEquals) ++pos_;
      return {t, input_.substr(start, pos_ - start)};
    }
    while (pos_ < input_.size() && !IsSpace(input_[pos_]) && !IsSpecial(input_[pos_])) ++pos_;
    return {Token::kIdentifier, input_.substr(start, pos_ - start)};
  }

  Lexeme Peek() {
    const size_t saved = pos_;
    Lexeme l = Next();
    pos_ = saved;
    return l;
  }

 private:
  absl::string_view input_;
  size_t pos_ = 0;
};

std::string Describe(const Lexeme& l) {
  return l.token == Token::kEnd ? "end of string" : absl::StrCat("'", l.text, "'");
}

}  // namespace

std::string InvalidLabelKeyReason(absl::string_view key) {
  absl::string_view name = key;
  const size_t slash = key.find('/');
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (prefix.empty()) return "the prefix before '/' must not be empty";
    if (!IsDnsSubdomain(prefix)) {
      return absl::StrCat("prefix \"", prefix,
                          "\" must be a DNS subdomain (lowercase alphanumeric characters, '-' or "
                          "'.', at most 253 characters)");
    }
    if (name.find('/') != absl::string_view::npos) return "a key may contain at most one '/'";
  }
  if (name.empty()) return "the name part must not be empty";
  if (name.size() > 63 || !IsQualifiedNamePart(name)) {
    return absl::StrCat("the name part \"", name, "\" ", kNameRule);
  }
  return "";
}

std::string InvalidLabelValueReason(absl::string_view value) {
  if (value.empty()) return "";
  if (value.size() > 63 || !IsQualifiedNamePart(value)) {
    return absl::StrCat("a label value ", kNameRule);
  }
  return "";
}

absl::StatusOr<LabelSelector> LabelSelector::Parse(absl::string_view selector) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("label selector ", QuotedSelector(selector), ": ", what));
  };
  if (selector.size() > kMaxSelectorBytes) {
    return error(absl::StrCat("at most ", kMaxSelectorBytes, " bytes"));
  }
  LabelSelector result;
  Lexer lexer(selector);
  if (lexer.Peek().token == Token::kEnd) return result;
  for (;;) {
    if (result.requirements_.size() >= kMaxSelectorTerms) {
      return error(absl::StrCat("at most ", kMaxSelectorTerms, " requirements"));
    }
    Requirement req;
    Lexeme first = lexer.Next();
    bool negated = false;
    if (first.token == Token::kNot) {
      negated = true;
      first = lexer.Next();
    }
    if (first.token != Token::kIdentifier) {
      return error(absl::StrCat("found ", Describe(first), ", expected a label key"));
    }
    req.key = std::string(first.text);
    if (std::string why = InvalidLabelKeyReason(req.key); !why.empty()) {
      return error(absl::StrCat("invalid label key \"", req.key, "\": ", why));
    }
    const Lexeme after_key = lexer.Peek();
    if (negated || after_key.token == Token::kEnd || after_key.token == Token::kComma) {
      req.op = negated ? Operator::kDoesNotExist : Operator::kExists;
    } else {
      const Lexeme op = lexer.Next();
      if (op.token == Token::kEquals || op.token == Token::kDoubleEquals ||
          op.token == Token::kNotEquals || op.token == Token::kGreater ||
          op.token == Token::kLess) {
        req.op = op.token == Token::kNotEquals ? Operator::kNotEquals
                 : op.token == Token::kGreater ? Operator::kGreaterThan
                 : op.token == Token::kLess    ? Operator::kLessThan
                                               : Operator::kEquals;
        // An exact value; nothing (end or comma) is the empty value.
        const Lexeme value = lexer.Peek();
        if (value.token == Token::kIdentifier) {
          lexer.Next();
          req.values.emplace_back(value.text);
        } else if (value.token == Token::kEnd || value.token == Token::kComma) {
          req.values.emplace_back();
        } else {
          return error(absl::StrCat("found ", Describe(value), " after \"", req.key, op.text,
                                    "\", expected a value"));
        }
      } else if (op.token == Token::kIdentifier && (op.text == "in" || op.text == "notin")) {
        req.op = op.text == "in" ? Operator::kIn : Operator::kNotIn;
        const Lexeme open = lexer.Next();
        if (open.token != Token::kOpenParen) {
          return error(absl::StrCat("found ", Describe(open), " after \"", req.key, " ", op.text,
                                    "\", expected '('"));
        }
        // VALUE (',' VALUE)* where a missing VALUE is the empty value; "()" is an empty set.
        bool expect_value = true;
        bool any = false;
        for (;;) {
          const Lexeme l = lexer.Next();
          if (l.token == Token::kCloseParen) {
            if (any && expect_value) req.values.emplace_back();  // trailing comma
            break;
          }
          if (l.token == Token::kComma) {
            if (expect_value) req.values.emplace_back();
            expect_value = true;
            any = true;
            continue;
          }
          if (l.token == Token::kIdentifier && expect_value) {
            req.values.emplace_back(l.text);
            expect_value = false;
            any = true;
            continue;
          }
          if (l.token == Token::kEnd) {
            return error(absl::StrCat("missing ')' after the values of \"", req.key, "\""));
          }
          return error(absl::StrCat("found ", Describe(l), " in the values of \"", req.key,
                                    "\", expected a value, ',' or ')'"));
        }
        if (req.values.empty()) {
          return error(absl::StrCat("the values of \"", req.key, " ", op.text,
                                    "\" must not be empty"));
        }
      } else {
        return error(absl::StrCat("found ", Describe(op), " after \"", req.key,
                                  "\", expected one of '=', '==', '!=', 'in', 'notin', '>', "
                                  "'<', ',' or the end"));
      }
    }
    for (const std::string& value : req.values) {
      if (std::string why = InvalidLabelValueReason(value); !why.empty()) {
        return error(
            absl::StrCat("invalid value \"", value, "\" for label \"", req.key, "\": ", why));
      }
    }
    if (req.op == Operator::kGreaterThan || req.op == Operator::kLessThan) {
      if (!absl::SimpleAtoi(req.values[0], &req.number)) {
        return error(absl::StrCat("the value \"", req.values[0], "\" of \"", req.key,
                                  "\" must be an integer for '>' and '<'"));
      }
    }
    std::sort(req.values.begin(), req.values.end());
    req.values.erase(std::unique(req.values.begin(), req.values.end()), req.values.end());
    result.requirements_.push_back(std::move(req));

    const Lexeme sep = lexer.Next();
    if (sep.token == Token::kEnd) break;
    if (sep.token != Token::kComma) {
      return error(absl::StrCat("found ", Describe(sep), ", expected ',' or the end"));
    }
  }
  std::stable_sort(result.requirements_.begin(), result.requirements_.end(),
                   [](const Requirement& a, const Requirement& b) { return a.key < b.key; });
  return result;
}

bool LabelSelector::Matches(const client::Object& object) const {
  for (const Requirement& req : requirements_) {
    const std::optional<absl::string_view> value = object.label(req.key);
    auto in_values = [&] {
      return std::binary_search(req.values.begin(), req.values.end(), *value,
                                [](const auto& a, const auto& b) {
                                  return absl::string_view(a) < absl::string_view(b);
                                });
    };
    bool ok = false;
    switch (req.op) {
      case Operator::kEquals:
      case Operator::kIn:
        ok = value.has_value() && in_values();
        break;
      case Operator::kNotEquals:
      case Operator::kNotIn:
        ok = !value.has_value() || !in_values();
        break;
      case Operator::kExists:
        ok = value.has_value();
        break;
      case Operator::kDoesNotExist:
        ok = !value.has_value();
        break;
      case Operator::kGreaterThan:
      case Operator::kLessThan: {
        int64_t n = 0;
        ok = value.has_value() && absl::SimpleAtoi(*value, &n) &&
             (req.op == Operator::kGreaterThan ? n > req.number : n < req.number);
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

std::string LabelSelector::ToString() const {
  std::vector<std::string> parts;
  for (const Requirement& req : requirements_) {
    switch (req.op) {
      case Operator::kEquals:
        parts.push_back(absl::StrCat(req.key, "=", req.values[0]));
        break;
      case Operator::kNotEquals:
        parts.push_back(absl::StrCat(req.key, "!=", req.values[0]));
        break;
      case Operator::kIn:
        parts.push_back(absl::StrCat(req.key, " in (", absl::StrJoin(req.values, ","), ")"));
        break;
      case Operator::kNotIn:
        parts.push_back(absl::StrCat(req.key, " notin (", absl::StrJoin(req.values, ","), ")"));
        break;
      case Operator::kExists:
        parts.push_back(req.key);
        break;
      case Operator::kDoesNotExist:
        parts.push_back(absl::StrCat("!", req.key));
        break;
      case Operator::kGreaterThan:
        parts.push_back(absl::StrCat(req.key, ">", req.values[0]));
        break;
      case Operator::kLessThan:
        parts.push_back(absl::StrCat(req.key, "<", req.values[0]));
        break;
    }
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace informerd::informer
