#include "client/api_error.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "simdjson.h"

namespace informerd::client {
namespace {

namespace od = simdjson::ondemand;

// The payload key; the value is the ApiError as a list of netstrings ("5:hello").
constexpr absl::string_view kPayloadUrl = "informerd.io/client.ApiError";

void PutField(std::string* out, absl::string_view value) {
  absl::StrAppend(out, value.size(), ":", value);
}

bool GetField(absl::string_view* in, std::string* value) {
  size_t colon = in->find(':');
  if (colon == absl::string_view::npos) return false;
  size_t n = 0;
  if (!absl::SimpleAtoi(in->substr(0, colon), &n) || in->size() - colon - 1 < n) return false;
  value->assign(in->data() + colon + 1, n);
  in->remove_prefix(colon + 1 + n);
  return true;
}

std::string Encode(const ApiError& e) {
  std::string out;
  PutField(&out, absl::StrCat(e.code));
  PutField(&out, e.reason);
  PutField(&out, e.message);
  PutField(&out, e.name);
  PutField(&out, e.group);
  PutField(&out, e.kind);
  PutField(&out, e.uid);
  PutField(&out, absl::StrCat(e.retry_after_seconds));
  PutField(&out, e.continue_token);
  PutField(&out, absl::StrCat(e.causes.size()));
  for (const StatusCause& c : e.causes) {
    PutField(&out, c.type);
    PutField(&out, c.message);
    PutField(&out, c.field);
  }
  return out;
}

std::optional<ApiError> Decode(absl::string_view in) {
  ApiError e;
  std::string code, retry, ncauses;
  if (!GetField(&in, &code) || !GetField(&in, &e.reason) || !GetField(&in, &e.message) ||
      !GetField(&in, &e.name) || !GetField(&in, &e.group) || !GetField(&in, &e.kind) ||
      !GetField(&in, &e.uid) || !GetField(&in, &retry) || !GetField(&in, &e.continue_token) ||
      !GetField(&in, &ncauses)) {
    return std::nullopt;
  }
  size_t n = 0;
  if (!absl::SimpleAtoi(code, &e.code) || !absl::SimpleAtoi(retry, &e.retry_after_seconds) ||
      !absl::SimpleAtoi(ncauses, &n)) {
    return std::nullopt;
  }
  for (size_t i = 0; i < n; ++i) {
    StatusCause c;
    if (!GetField(&in, &c.type) || !GetField(&in, &c.message) || !GetField(&in, &c.field)) {
      return std::nullopt;
    }
    e.causes.push_back(std::move(c));
  }
  return e;
}

absl::StatusCode CodeFor(const ApiError& e) {
  if (e.reason == "AlreadyExists") return absl::StatusCode::kAlreadyExists;
  if (e.reason == "Conflict") return absl::StatusCode::kAborted;
  if (e.reason == "Expired" || e.reason == "Gone") return absl::StatusCode::kOutOfRange;
  switch (e.code) {
    case 400:
    case 413:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
    case 406:
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      break;
  }
  if (e.reason == "Timeout" || e.reason == "ServerTimeout") return absl::StatusCode::kDeadlineExceeded;
  if (e.code >= 500) return absl::StatusCode::kInternal;
  if (e.code >= 400) return absl::StatusCode::kFailedPrecondition;
  return absl::StatusCode::kUnknown;
}

// Reads a string field, leaving `out` untouched if the value is null or not a string.
simdjson::error_code ReadString(od::value v, std::string* out) {
  std::string_view s;
  auto err = v.get_string().get(s);
  if (err == simdjson::INCORRECT_TYPE) return simdjson::SUCCESS;
  if (err) return err;
  out->assign(s);
  return simdjson::SUCCESS;
}

simdjson::error_code ReadInt(od::value v, int* out) {
  int64_t n = 0;
  auto err = v.get_int64().get(n);
  if (err == simdjson::INCORRECT_TYPE) return simdjson::SUCCESS;
  if (err) return err;
  *out = static_cast<int>(n);
  return simdjson::SUCCESS;
}

simdjson::error_code ReadDetails(od::value v, ApiError* e) {
  od::object obj;
  auto err = v.get_object().get(obj);
  if (err == simdjson::INCORRECT_TYPE) return simdjson::SUCCESS;
  if (err) return err;
  for (auto field : obj) {
    std::string_view key;
    if ((err = field.unescaped_key().get(key))) return err;
    od::value fv;
    if ((err = field.value().get(fv))) return err;
    if (key == "name") {
      err = ReadString(fv, &e->name);
    } else if (key == "group") {
      err = ReadString(fv, &e->group);
    } else if (key == "kind") {
      err = ReadString(fv, &e->kind);
    } else if (key == "uid") {
      err = ReadString(fv, &e->uid);
    } else if (key == "retryAfterSeconds") {
      err = ReadInt(fv, &e->retry_after_seconds);
    } else if (key == "causes") {
      od::array arr;
      err = fv.get_array().get(arr);
      if (err == simdjson::INCORRECT_TYPE) continue;
      if (err) return err;
      for (auto item : arr) {
        od::object cobj;
        if ((err = item.get_object().get(cobj))) return err;
        StatusCause c;
        for (auto cf : cobj) {
          std::string_view ckey;
          if ((err = cf.unescaped_key().get(ckey))) return err;
          od::value cv;
          if ((err = cf.value().get(cv))) return err;
          if (ckey == "reason") {
            err = ReadString(cv, &c.type);
          } else if (ckey == "message") {
            err = ReadString(cv, &c.message);
          } else if (ckey == "field") {
            err = ReadString(cv, &c.field);
          }
          if (err) return err;
        }
        e->causes.push_back(std::move(c));
      }
      continue;
    }
    if (err) return err;
  }
  return simdjson::SUCCESS;
}

}  // namespace

std::string ReasonForCode(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 406: return "NotAcceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "RequestEntityTooLarge";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: break;
  }
  if (code >= 500) return "InternalError";
  return "Unknown";
}

absl::StatusOr<ApiError> ParseApiError(absl::string_view json, int http_code) {
  simdjson::padded_string padded(json.data(), json.size());
  od::parser parser;
  od::document doc;
  od::object obj;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(obj)) {
    return absl::InvalidArgumentError("not a Kubernetes Status: not a JSON object");
  }
  ApiError e;
  std::string kind, status;
  for (auto field : obj) {
    std::string_view key;
    od::value v;
    simdjson::error_code err = field.unescaped_key().get(key);
    if (!err) err = field.value().get(v);
    if (!err) {
      if (key == "kind") {
        err = ReadString(v, &kind);
      } else if (key == "status") {
        err = ReadString(v, &status);
      } else if (key == "message") {
        err = ReadString(v, &e.message);
      } else if (key == "reason") {
        err = ReadString(v, &e.reason);
      } else if (key == "code") {
        err = ReadInt(v, &e.code);
      } else if (key == "details") {
        err = ReadDetails(v, &e);
      } else if (key == "metadata") {
        od::object meta;
        if (!v.get_object().get(meta)) {
          for (auto mf : meta) {
            std::string_view mkey;
            od::value mv;
            if ((err = mf.unescaped_key().get(mkey)) || (err = mf.value().get(mv))) break;
            if (mkey == "continue" && (err = ReadString(mv, &e.continue_token))) break;
          }
        }
      }
    }
    if (err) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a Kubernetes Status: ", simdjson::error_message(err)));
    }
  }
  if (kind != "Status" && !(kind.empty() && !status.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Kubernetes Status: kind is \"", kind, "\""));
  }
  if (e.code == 0) e.code = http_code;
  if (e.reason.empty()) e.reason = ReasonForCode(e.code);
  return e;
}

absl::Status ApiErrorFromResponse(int http_code, absl::string_view body,
                                  absl::string_view retry_after_header) {
  ApiError e;
  absl::StatusOr<ApiError> parsed = ParseApiError(body, http_code);
  if (parsed.ok()) {
    e = *std::move(parsed);
  } else {
    e.code = http_code;
    e.reason = ReasonForCode(http_code);
    absl::string_view text = absl::StripAsciiWhitespace(body.substr(0, 1024));
    e.message = text.empty()
                    ? absl::StrFormat("the server responded with HTTP %d (%s)", http_code, e.reason)
                    : absl::StrFormat("the server responded with HTTP %d (%s): %s", http_code,
                                      e.reason, text);
  }
  int header_seconds = 0;
  if (e.retry_after_seconds == 0 &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(retry_after_header), &header_seconds) &&
      header_seconds > 0) {
    e.retry_after_seconds = header_seconds;
  }
  return ToStatus(e);
}

absl::Status ToStatus(const ApiError& error) {
  absl::Status s(CodeFor(error), error.message.empty() ? error.reason : error.message);
  s.SetPayload(kPayloadUrl, absl::Cord(Encode(error)));
  return s;
}

std::optional<ApiError> GetApiError(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  auto payload = status.GetPayload(kPayloadUrl);  // absl::optional in Debian's Abseil
  if (!payload) return std::nullopt;
  return Decode(std::string(*payload));
}

int ApiErrorCode(const absl::Status& status) {
  std::optional<ApiError> e = GetApiError(status);
  return e ? e->code : 0;
}

std::string ApiErrorReason(const absl::Status& status) {
  std::optional<ApiError> e = GetApiError(status);
  return e ? e->reason : std::string();
}

std::string DescribeStatus(const absl::Status& status) {
  if (status.ok()) return "";
  std::string out = absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  if (std::string reason = ApiErrorReason(status); !reason.empty()) {
    absl::StrAppend(&out, " (", reason, ")");
  }
  return out;
}

namespace {
bool Matches(const absl::Status& status, absl::string_view reason, int code) {
  std::optional<ApiError> e = GetApiError(status);
  if (!e) return false;
  if (e->reason == reason) return true;
  // client-go falls back to the code only when the reason is not a known one.
  return code != 0 && e->code == code && (e->reason.empty() || e->reason == "Unknown" ||
                                          e->reason == ReasonForCode(code));
}
}  // namespace

bool IsExpired(const absl::Status& status) {
  return Matches(status, "Expired", 410) || Matches(status, "Gone", 410);
}
bool IsTooManyRequests(const absl::Status& status) {
  return Matches(status, "TooManyRequests", 429);
}
bool IsConflict(const absl::Status& status) { return Matches(status, "Conflict", 0); }
bool IsAlreadyExists(const absl::Status& status) { return Matches(status, "AlreadyExists", 0); }
bool IsNotFound(const absl::Status& status) { return Matches(status, "NotFound", 404); }
bool IsForbidden(const absl::Status& status) { return Matches(status, "Forbidden", 403); }
bool IsUnauthorized(const absl::Status& status) { return Matches(status, "Unauthorized", 401); }
bool IsInternalError(const absl::Status& status) { return Matches(status, "InternalError", 500); }
bool IsTimeout(const absl::Status& status) {
  return Matches(status, "Timeout", 504) || Matches(status, "ServerTimeout", 0);
}
bool IsInvalid(const absl::Status& status) { return Matches(status, "Invalid", 422); }
bool IsBadRequest(const absl::Status& status) { return Matches(status, "BadRequest", 400); }

bool IsTooLargeResourceVersion(const absl::Status& status) {
  std::optional<ApiError> e = GetApiError(status);
  if (!e || e->reason != "Timeout") return false;
  for (const StatusCause& c : e->causes) {
    if (c.type == "ResourceVersionTooLarge") return true;
  }
  return false;
}

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  std::optional<ApiError> e = GetApiError(status);
  if (!e || e->retry_after_seconds <= 0) return std::nullopt;
  return absl::Seconds(e->retry_after_seconds);
}

}  // namespace informerd::client
