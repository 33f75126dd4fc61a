#include "server/auth/reviews.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_writer.h"
#include "simdjson.h"

namespace informerd::auth {
namespace {

absl::StatusOr<client::Client::RawResponse> Post(client::Client& client, std::string path,
                                                 std::string body, absl::Duration timeout) {
  client::HttpRequest request;
  request.method = "POST";
  request.path = std::move(path);
  request.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  request.body = std::move(body);
  request.timeout = timeout;
  return client.Send(std::move(request));
}

absl::Status NotAReview(absl::string_view what, absl::string_view field) {
  return absl::InternalError(
      absl::StrCat("the API server's ", what, " response has no valid ", field));
}

// Optional string field `key` of `obj` ("" when absent or not a string).
std::string StringField(simdjson::dom::object obj, const char* key) {
  std::string_view v;
  if (obj[key].get_string().get(v) != simdjson::SUCCESS) return "";
  return std::string(v);
}

std::vector<std::string> StringArray(simdjson::dom::object obj, const char* key) {
  std::vector<std::string> out;
  simdjson::dom::array a;
  if (obj[key].get_array().get(a) != simdjson::SUCCESS) return out;
  for (simdjson::dom::element e : a) {
    std::string_view v;
    if (e.get_string().get(v) == simdjson::SUCCESS) out.emplace_back(v);
  }
  return out;
}

}  // namespace

std::string Attributes::Describe() const {
  std::string what = resource;
  if (!group.empty()) absl::StrAppend(&what, ".", group);
  std::string out = absl::StrCat(verb, " ", what);
  if (!name.empty()) absl::StrAppend(&out, " \"", name, "\"");
  if (!namespace_name.empty()) {
    absl::StrAppend(&out, " in namespace \"", namespace_name, "\"");
  }
  if (!cluster.empty()) absl::StrAppend(&out, " in cluster \"", cluster, "\"");
  return out;
}

std::string TokenReviewJson(absl::string_view token, const std::vector<std::string>& audiences) {
  std::string out =
      R"({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":)";
  AppendJsonString(&out, token);
  if (!audiences.empty()) {
    out.append(R"(,"audiences":)");
    AppendJsonStrings(&out, audiences);
  }
  out.append("}}");
  return out;
}

std::string SubjectAccessReviewJson(const Identity& identity, const Attributes& a) {
  std::string out =
      R"({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":)";
  AppendJsonString(&out, identity.user);
  if (!identity.uid.empty()) {
    out.append(R"(,"uid":)");
    AppendJsonString(&out, identity.uid);
  }
  out.append(R"(,"groups":)");
  AppendJsonStrings(&out, identity.groups);
  if (!identity.extra.empty()) {
    out.append(R"(,"extra":{)");
    for (size_t i = 0; i < identity.extra.size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendJsonString(&out, identity.extra[i].first);
      out.push_back(':');
      AppendJsonStrings(&out, identity.extra[i].second);
    }
    out.push_back('}');
  }
  out.append(R"(,"resourceAttributes":{"verb":)");
  AppendJsonString(&out, a.verb);
  out.append(R"(,"group":)");
  AppendJsonString(&out, a.group);
  if (!a.version.empty()) {
    out.append(R"(,"version":)");
    AppendJsonString(&out, a.version);
  }
  out.append(R"(,"resource":)");
  AppendJsonString(&out, a.resource);
  if (!a.namespace_name.empty()) {
    out.append(R"(,"namespace":)");
    AppendJsonString(&out, a.namespace_name);
  }
  if (!a.name.empty()) {
    out.append(R"(,"name":)");
    AppendJsonString(&out, a.name);
  }
  out.append("}}}");
  return out;
}

absl::StatusOr<TokenReviewResult> ParseTokenReview(absl::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) {
    return absl::InternalError("the API server's TokenReview response is not JSON");
  }
  simdjson::dom::object status;
  if (doc["status"].get_object().get(status) != simdjson::SUCCESS) {
    return NotAReview("TokenReview", "status");
  }
  TokenReviewResult result;
  bool authenticated = false;
  if (status["authenticated"].get_bool().get(authenticated) == simdjson::SUCCESS) {
    result.authenticated = authenticated;
  }
  result.error = StringField(status, "error");
  result.identity.method = "token";
  if (!result.authenticated) return result;
  simdjson::dom::object user;
  if (status["user"].get_object().get(user) != simdjson::SUCCESS) {
    return NotAReview("TokenReview", "status.user");
  }
  result.identity.user = StringField(user, "username");
  if (result.identity.user.empty()) return NotAReview("TokenReview", "status.user.username");
  result.identity.uid = StringField(user, "uid");
  result.identity.groups = StringArray(user, "groups");
  simdjson::dom::object extra;
  if (user["extra"].get_object().get(extra) == simdjson::SUCCESS) {
    for (auto [key, value] : extra) {
      std::vector<std::string> values;
      simdjson::dom::array a;
      if (value.get_array().get(a) == simdjson::SUCCESS) {
        for (simdjson::dom::element e : a) {
          std::string_view v;
          if (e.get_string().get(v) == simdjson::SUCCESS) values.emplace_back(v);
        }
      }
      result.identity.extra.emplace_back(std::string(key), std::move(values));
    }
    std::sort(result.identity.extra.begin(), result.identity.extra.end());
  }
  return result;
}

absl::StatusOr<AccessDecision> ParseSubjectAccessReview(absl::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) {
    return absl::InternalError("the API server's SubjectAccessReview response is not JSON");
  }
  simdjson::dom::object status;
  if (doc["status"].get_object().get(status) != simdjson::SUCCESS) {
    return NotAReview("SubjectAccessReview", "status");
  }
  AccessDecision decision;
  bool allowed = false;
  if (status["allowed"].get_bool().get(allowed) == simdjson::SUCCESS) decision.allowed = allowed;
  decision.reason = StringField(status, "reason");
  // RBAC reports bindings it could not resolve (a missing role) as an evaluation error beside
  // its decision; the decision stands, the error explains it.
  if (decision.reason.empty()) decision.reason = StringField(status, "evaluationError");
  return decision;
}

absl::StatusOr<TokenReviewResult> ReviewToken(client::Client& client, absl::string_view token,
                                              const std::vector<std::string>& audiences,
                                              absl::Duration timeout) {
  absl::StatusOr<client::Client::RawResponse> r =
      Post(client, "/apis/authentication.k8s.io/v1/tokenreviews",
           TokenReviewJson(token, audiences), timeout);
  if (!r.ok()) return r.status();
  return ParseTokenReview(r->body);
}

absl::StatusOr<AccessDecision> ReviewAccess(client::Client& client, const Identity& identity,
                                            const Attributes& attributes,
                                            absl::Duration timeout) {
  absl::StatusOr<client::Client::RawResponse> r =
      Post(client, "/apis/authorization.k8s.io/v1/subjectaccessreviews",
           SubjectAccessReviewJson(identity, attributes), timeout);
  if (!r.ok()) return r.status();
  return ParseSubjectAccessReview(r->body);
}

}  // namespace informerd::auth
