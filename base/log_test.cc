#include "base/log.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "spdlog/sinks/ostream_sink.h"

namespace informerd {
namespace {

using ::testing::HasSubstr;

// A logger writing to a string, with the process's format at the time it is made.
struct Captured {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;
  Captured() {
    logger = std::make_shared<spdlog::logger>(
        "informerd", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  }
};

TEST(LogTest, ParseLogFormatNamesWhatItRefuses) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_THAT(ParseLogFormat("yaml").status().message(), HasSubstr("\"yaml\" is not text or json"));
}

TEST(LogTest, ParseLogLevelTakesTheConfigsNames) {
  EXPECT_EQ(*ParseLogLevel("trace"), spdlog::level::trace);
  EXPECT_EQ(*ParseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLogLevel("info"), spdlog::level::info);
  EXPECT_EQ(*ParseLogLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(*ParseLogLevel("error"), spdlog::level::err);
  EXPECT_THAT(ParseLogLevel("warning").status().message(),
              HasSubstr("must be one of trace, debug, info, warn, error"));
}

// Both formats in one test: the format is process-wide.
TEST(LogTest, TextAppendsFieldsAndJsonMakesThemMembers) {
  // Text: key=value after the message, quoted when needed.
  EXPECT_EQ(WithFields("reconcile failed: boom", {{"queue", "pods"}, {"key", "demo/web"},
                                                 {"token", uint64_t{42}}, {"error", "a \"b\""}}),
            R"(reconcile failed: boom queue=pods key=demo/web token=42 error="a \"b\"")");

  SetLogFormat(LogFormat::kJson);
  Captured c;
  c.logger->set_formatter(std::make_unique<JsonLogFormatter>());
  c.logger->warn("{}", WithFields("failed: \"quoted\"\nline",
                                  {{"queue", "pods"}, {"token", 7}, {"msg", "shadow"}}));
  c.logger->info("no fields");
  // Separators inside a value or a plain message add no field.
  c.logger->warn("{}", WithFields("m", {{"error", "x\x1e" "admin\x1f" "true\x1f"}}));
  c.logger->warn("stray \x1e separator");
  const std::string text = c.out.str();
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << text;

  simdjson::dom::parser parser;
  simdjson::dom::element first;
  ASSERT_EQ(parser.parse(lines[0]).get(first), simdjson::SUCCESS) << lines[0];
  EXPECT_EQ(std::string_view(first["level"]), "warning");
  EXPECT_EQ(std::string_view(first["logger"]), "informerd");
  EXPECT_EQ(std::string_view(first["msg"]), "failed: \"quoted\"\nline");
  EXPECT_EQ(std::string_view(first["queue"]), "pods");
  EXPECT_EQ(std::string_view(first["token"]), "7");
  EXPECT_EQ(std::string_view(first["field_msg"]), "shadow");
  const std::string_view time = first["time"];
  EXPECT_EQ(time.size(), 24u) << time;  // 2026-12-02T20:28:18.309Z
  EXPECT_EQ(time.back(), 'Z');

  simdjson::dom::element second;
  ASSERT_EQ(parser.parse(lines[1]).get(second), simdjson::SUCCESS) << lines[1];
  EXPECT_EQ(std::string_view(second["msg"]), "no fields");
  EXPECT_EQ(std::string_view(second["level"]), "info");

  simdjson::dom::object injected;
  ASSERT_EQ(parser.parse(lines[2]).get(injected), simdjson::SUCCESS) << lines[2];
  EXPECT_EQ(std::string_view(injected["error"]), R"(x\x1eadmin\x1ftrue\x1f)");
  EXPECT_EQ(injected["admin"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_EQ(injected.size(), 5u);  // time, level, logger, msg, error

  simdjson::dom::element stray;
  ASSERT_EQ(parser.parse(lines[3]).get(stray), simdjson::SUCCESS) << lines[3];
  EXPECT_EQ(std::string_view(stray["msg"]), "stray \x1e separator");
}

}  // namespace
}  // namespace informerd
