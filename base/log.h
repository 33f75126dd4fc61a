// Logging with fields: a message for people, and key/value fields (queue, key, token, informer,
// ...) that log pipelines can index.
//
//   LogWithFields(spdlog::level::warn, {{"queue", queue}, {"key", key}, {"token", token}},
//                 "reconcile failed: {}", error);
//
// Text, the default format, prints the message and then the fields as key=value (quoted when a
// value has a space, a quote or an '='):
//   [2026-12-02 20:28:18.309] [informerd] [warning] reconcile failed: boom queue=pods key=demo/web token=42
// JSON (SetLogFormat(LogFormat::kJson)) prints one object per line, the fields as members:
//   {"time":"2026-12-02T20:28:18.309Z","level":"warning","logger":"informerd","msg":"reconcile
//    failed: boom","queue":"pods","key":"demo/web","token":"42"}
// Plain spdlog calls work in both formats (their records have no fields).
//
// Thread safety: SetLogFormat once at start, before other threads log; the rest may be called
// from any thread.
#ifndef INFORMERD_BASE_LOG_H_
#define INFORMERD_BASE_LOG_H_

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"
#include "spdlog/spdlog.h"

namespace informerd {

enum class LogFormat { kText, kJson };

// "text" or "json"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// "trace", "debug", "info", "warn" or "error"; INVALID_ARGUMENT otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view name);

// Sets the format of every spdlog logger (and of those made later with spdlog's factories).
void SetLogFormat(LogFormat format);

struct LogField {
  LogField(absl::string_view key, const absl::AlphaNum& value)
      : key(key), value(value.Piece()) {}
  absl::string_view key;
  std::string value;
};

// The record's text as the current format carries it: text appends " key=value"s; JSON
// separates the fields with control characters that JsonLogFormatter turns into members.
std::string WithFields(std::string message, std::initializer_list<LogField> fields);

template <typename... Args>
void LogWithFields(spdlog::level::level_enum level, std::initializer_list<LogField> fields,
                   fmt::format_string<Args...> format, Args&&... args) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  logger->log(level, "{}",
              WithFields(fmt::format(format, std::forward<Args>(args)...), fields));
}

// One JSON object per record (exposed for tests; SetLogFormat installs it).
class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_LOG_H_
