#include "base/flags.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace informerd {
namespace {

// The flags --help lists: those defined outside Abseil itself.
bool Listed(const absl::CommandLineFlag& flag) {
  return !absl::StrContains(flag.Filename(), "absl/");
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

// Edits (insertions, deletions, substitutions) that turn `a` into `b`.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The flag spelled most like `name` (underscores as dashes), if one is close enough to be meant.
std::string Closest(absl::string_view name) {
  const std::string want = Dashed(name);
  std::string best;
  size_t best_distance = std::max<size_t>(2, want.size() / 3) + 1;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (!Listed(*flag) && flag_name != "help" && flag_name != "flagfile") continue;
    const std::string candidate = Dashed(flag_name);
    const size_t d = EditDistance(want, candidate);
    if (d < best_distance || (d == best_distance && candidate < best)) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

// `--help` (or -h, --helpshort): the usage message, then every listed flag in its Kubernetes
// spelling, its default and its help; exit status 0, as Kubernetes components exit.
[[noreturn]] void PrintHelp(absl::string_view usage) {
  std::map<std::string, const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (Listed(*flag)) flags.emplace(Dashed(name), flag);
  }
  std::string text = absl::StrCat(usage, "\n\nFlags:\n");
  for (const auto& [name, flag] : flags) {
    const bool boolean = flag->IsOfType<bool>();
    absl::StrAppend(&text, "  --", name, boolean ? "" : "=VALUE");
    // Optional flags (empty by default) say their effective default in their help.
    const std::string default_value = flag->DefaultValue();
    if (!default_value.empty() && !(boolean && default_value == "false")) {
      absl::StrAppend(&text, "  (default ", default_value, ")");
    }
    absl::StrAppend(&text, "\n");
    // The help, word-wrapped at 100 columns under the name.
    for (absl::string_view paragraph : absl::StrSplit(flag->Help(), '\n')) {
      std::string line = "     ";
      for (absl::string_view word : absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
        if (line.size() > 5 && line.size() + 1 + word.size() > 100) {
          absl::StrAppend(&text, line, "\n");
          line = "     ";
        }
        absl::StrAppend(&line, " ", word);
      }
      absl::StrAppend(&text, line, "\n");
    }
  }
  absl::StrAppend(&text,
                  "\nEvery flag is also accepted with underscores (--leader_elect for "
                  "--leader-elect), as Abseil spells them;\n--flagfile=PATH reads one flag per "
                  "line; --helpfull lists Abseil's own flags too.\n");
  std::fputs(text.c_str(), stdout);
  std::exit(0);
}

}  // namespace

std::vector<std::string> KubernetesSpelling(const std::vector<std::string>& args,
                                            absl::string_view usage) {
  const bool undefok = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return absl::StartsWith(a, "--undefok") || absl::StartsWith(a, "-undefok");
  });
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (i == 0 || arg == "--" || arg.size() < 2 || arg[0] != '-') {
      out.push_back(arg);
      if (arg == "--") out.insert(out.end(), args.begin() + i + 1, args.end());
      if (arg == "--") break;
      continue;
    }
    if (arg == "-h" || arg == "--help" || arg == "-help" || arg == "--helpshort") PrintHelp(usage);
    absl::string_view body = arg;
    body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    // Abseil's usage flags, which it reads itself and does not register.
    static constexpr absl::string_view kUsageFlags[] = {
        "helpfull", "helppackage", "helpon", "helpmatch", "help", "version", "only_check_args"};
    if (std::find(std::begin(kUsageFlags), std::end(kUsageFlags), name) != std::end(kUsageFlags)) {
      out.push_back(arg);
      continue;
    }
    const std::string underscored = absl::StrReplaceAll(name, {{"-", "_"}});
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(underscored);
    // --noname turns the boolean flag `name` off, as Abseil reads it.
    const absl::CommandLineFlag* negated =
        absl::StartsWith(underscored, "no") ? absl::FindCommandLineFlag(underscored.substr(2))
                                            : nullptr;
    if (flag == nullptr && (negated == nullptr || !negated->IsOfType<bool>())) {
      if (!undefok) {
        std::string why = absl::StrCat("Unknown command line flag '", name, "'");
        if (const std::string closest = Closest(name); !closest.empty()) {
          absl::StrAppend(&why, ". Did you mean --", closest, "?");
        }
        std::exit(FlagError(absl::InvalidArgumentError(why)));
      }
      out.push_back(arg);
      continue;
    }
    out.push_back(absl::StrCat("--", underscored,
                               equals == absl::string_view::npos ? "" : body.substr(equals)));
    // `--name value`: the value is the next argument, given as it is.
    if (flag != nullptr && equals == absl::string_view::npos && !flag->IsOfType<bool>() &&
        i + 1 < args.size()) {
      out.push_back(args[++i]);
    }
  }
  return out;
}

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
  std::vector<std::string> spelled =
      KubernetesSpelling(std::vector<std::string>(argv, argv + argc), usage);
  std::vector<char*> args;
  for (std::string& arg : spelled) args.push_back(arg.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
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
