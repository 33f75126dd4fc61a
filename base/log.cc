#include "base/log.h"

#include <atomic>
#include <chrono>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/json_writer.h"

namespace informerd {
namespace {

// In JSON records, fields follow the message as RS key US value (RS key US value ...).
constexpr char kRecordSeparator = '\x1e';
constexpr char kUnitSeparator = '\x1f';

std::atomic<bool> json_format{false};

bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      return true;
    }
  }
  return false;
}

void AppendTextValue(std::string* out, absl::string_view value) {
  if (!NeedsQuotes(value)) {
    out->append(value.data(), value.size());
    return;
  }
  AppendJsonString(out, value);  // quoted, with quotes, backslashes and controls escaped
}

// The separators in text that goes into a JSON record (a worker's error message, say) are
// written as "\x1e" and "\x1f", so that nobody can add fields to a record.
std::string Defused(absl::string_view text) {
  return absl::StrReplaceAll(text, {{absl::string_view(&kRecordSeparator, 1), "\\x1e"},
                                    {absl::string_view(&kUnitSeparator, 1), "\\x1f"}});
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not text or json"));
}

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view name) {
  if (name == "trace") return spdlog::level::trace;
  if (name == "debug") return spdlog::level::debug;
  if (name == "info") return spdlog::level::info;
  if (name == "warn") return spdlog::level::warn;
  if (name == "error") return spdlog::level::err;
  return absl::InvalidArgumentError("must be one of trace, debug, info, warn, error");
}

void SetLogFormat(LogFormat format) {
  json_format.store(format == LogFormat::kJson, std::memory_order_relaxed);
  if (format == LogFormat::kJson) spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
}

std::string WithFields(std::string message, std::initializer_list<LogField> fields) {
  const bool json = json_format.load(std::memory_order_relaxed);
  if (json) message = Defused(message);
  for (const LogField& f : fields) {
    if (json) {
      message.push_back(kRecordSeparator);
      message.append(Defused(f.key));
      message.push_back(kUnitSeparator);
      message.append(Defused(f.value));
    } else {
      absl::StrAppend(&message, " ", f.key, "=");
      AppendTextValue(&message, f.value);
    }
  }
  return message;
}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto since_epoch = msg.time.time_since_epoch();
  const std::time_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  const int64_t millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
  std::tm utc;
  gmtime_r(&seconds, &utc);
  std::string out = absl::StrFormat(
      "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":", utc.tm_year + 1900,
      utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  AppendJsonString(&out, absl::string_view(level.data(), level.size()));
  out.append(",\"logger\":");
  AppendJsonString(&out, absl::string_view(msg.logger_name.data(), msg.logger_name.size()));
  const absl::string_view payload(msg.payload.data(), msg.payload.size());
  // A plain spdlog call's text may hold a stray separator: only "RS key US value" after the
  // message is a field.
  std::vector<absl::string_view> parts = absl::StrSplit(payload, kRecordSeparator);
  size_t fields = parts.size();
  while (fields > 1 && absl::StrContains(parts[fields - 1], kUnitSeparator)) --fields;
  const size_t message_end =
      fields == parts.size() ? payload.size()
                             : static_cast<size_t>(parts[fields].data() - payload.data()) - 1;
  out.append(",\"msg\":");
  AppendJsonString(&out, payload.substr(0, message_end));
  for (size_t i = fields; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(parts[i], absl::MaxSplits(kUnitSeparator, 1));
    // "time", "level", "logger" and "msg" are the record's own: a field of that name is renamed.
    std::string key(kv.first);
    if (key == "time" || key == "level" || key == "logger" || key == "msg") key.insert(0, "field_");
    out.push_back(',');
    AppendJsonString(&out, key);
    out.push_back(':');
    AppendJsonString(&out, kv.second);
  }
  out.append("}\n");
  dest.append(out.data(), out.data() + out.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace informerd
