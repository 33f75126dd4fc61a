#include "base/flags.h"

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace informerd {

void ParseFlags(int argc, char** argv, absl::string_view usage,
                std::vector<std::string>* positional) {
  absl::FlagsUsageConfig config;
  // Abseil's default shows only the flags of a file named like the program; informerd's binaries
  // define theirs where they belong (server/flags.cc for informerd), so --help shows every flag
  // defined outside Abseil itself.
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (positional != nullptr) {
    positional->assign(rest.begin() + 1, rest.end());
  } else if (rest.size() > 1) {
    std::exit(FlagError(absl::InvalidArgumentError(
        absl::StrCat("Unexpected argument '", rest[1], "' (flags are --name=value; see --help)"))));
  }
}

absl::Status IllegalValue(const absl::CommandLineFlag& flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Illegal value '", flag.CurrentValue(),
                                                 "' specified for flag '", flag.Name(), "': ",
                                                 why));
}

absl::Status CheckPositive(const absl::Flag<absl::Duration>& flag) {
  const absl::Duration d = absl::GetFlag(flag);
  if (d > absl::ZeroDuration() && d != absl::InfiniteDuration()) return absl::OkStatus();
  return IllegalValue(flag, "expected a positive duration such as 10s");
}

int FlagError(const absl::Status& status) {
  std::fprintf(stderr, "ERROR: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace informerd
