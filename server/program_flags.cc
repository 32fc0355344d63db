#include "server/program_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/config.h"

// Registered, it is parsed like any flag (--help, -help, --help=true,
// --nohelp) instead of being taken by absl's usage handling, which exits 1.
ABSL_FLAG(bool, help, false,
          "print the program's own flags with their defaults, then exit 0 "
          "(--helpfull: every flag)");

namespace tensord::server {
namespace {

constexpr size_t kWidth = 80;

// The source root this file was compiled under: flag file names start with
// it. Empty if this file has moved; names then only keep a longer prefix.
absl::string_view SourceRoot() {
  constexpr absl::string_view kSelf = __FILE__;
  constexpr absl::string_view kHere = "server/program_flags.cc";
  return absl::EndsWith(kSelf, kHere)
             ? kSelf.substr(0, kSelf.size() - kHere.size())
             : absl::string_view();
}

// "server/main.cc" for a file of ours; otherwise, as absl's default does,
// the name without leading slashes. absl applies it to every flag's
// Filename(), so the help filters below see these names.
std::string NormalizeFilename(absl::string_view filename) {
  absl::ConsumePrefix(&filename, SourceRoot());
  while (absl::ConsumePrefix(&filename, "/")) {
  }
  return std::string(filename);
}

// `text` split into words and wrapped to kWidth columns, each line indented
// by `indent` spaces; newlines in `text` are kept.
std::string Wrapped(absl::string_view text, size_t indent) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t column = 0;
    for (absl::string_view word :
         absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      if (column > indent && column + 1 + word.size() > kWidth) {
        out += '\n';
        column = 0;
      }
      if (column == 0) {
        out.append(indent, ' ');
        column = indent;
      } else {
        out += ' ';
        ++column;
      }
      absl::StrAppend(&out, word);
      column += word.size();
    }
    out += '\n';
  }
  return out;
}

std::string Quoted(const absl::CommandLineFlag& flag, std::string value) {
  return flag.IsOfType<std::string>() ? absl::StrCat("\"", value, "\"") : value;
}

// The --help text: the usage message, then each of the program's flags
// (`ours` says which files hold them) with its default and help.
std::string HelpText(const ProgramUsage& usage,
                     const std::vector<std::string>& ours) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    if (std::find(ours.begin(), ours.end(), flag->Filename()) != ours.end()) {
      flags.push_back(flag);
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });

  std::string out = absl::StrCat(usage.name, ": ", absl::ProgramUsageMessage(),
                                 "\n\nFlags (--name=value or --name value; "
                                 "- and _ in names are the same):\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(&out, "  --",
                    absl::StrReplaceAll(flag->Name(), {{"_", "-"}}),
                    " (default ", Quoted(*flag, flag->DefaultValue()));
    if (const std::string now = flag->CurrentValue();
        now != flag->DefaultValue()) {
      absl::StrAppend(&out, "; currently ", Quoted(*flag, now));
    }
    absl::StrAppend(&out, ")\n", Wrapped(flag->Help(), 6));
  }
  absl::StrAppend(&out, "\n",
                  Wrapped("--helpfull lists every flag, gRPC's and absl's "
                          "too; --helpmatch=TEXT those whose name, help or "
                          "file holds TEXT; --version prints the version.",
                          0));
  return out;
}

}  // namespace

void ParseProgramFlags(int argc, char** argv, const ProgramUsage& usage) {
  std::vector<std::string> ours;
  for (const std::string& file : usage.flag_files) {
    ours.push_back(NormalizeFilename(file));
  }
  auto is_ours = [ours](absl::string_view filename) {
    return std::find(ours.begin(), ours.end(), filename) != ours.end();
  };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = is_ours;
  config.contains_helpshort_flags = is_ours;
  config.contains_helppackage_flags = is_ours;
  config.version_string = [name = usage.name] {
    return absl::StrCat(name, " ", TENSORD_VERSION, "\n");
  };
  config.normalize_filename = NormalizeFilename;
  absl::SetFlagsUsageConfig(std::move(config));

  // absl prints "<name>: " before the message; wrap as if it were there.
  // The example stays on one line, to be copied.
  const std::string header = absl::StrCat(usage.name, ": ");
  const std::string summary = Wrapped(header + usage.summary, 0);
  absl::SetProgramUsageMessage(
      absl::StrCat(absl::StripPrefix(summary, header), "\nUsage: ", usage.name,
                   " [flags]\nExample: ", usage.example));

  std::vector<std::string> args = NormalizeFlagSpelling(argc, argv);
  // absl's --help=TEXT (the flags whose name, help or file holds TEXT) is
  // its --helpmatch=TEXT; our bool --help would refuse the value.
  for (std::string& arg : args) {
    if (arg == "--") break;
    absl::string_view value = arg;
    bool ignored = false;
    if ((absl::ConsumePrefix(&value, "--help=") ||
         absl::ConsumePrefix(&value, "-help=")) &&
        !absl::SimpleAtob(value, &ignored)) {
      arg = absl::StrCat("--helpmatch=", value);
    }
  }
  std::vector<char*> arg_ptrs;
  for (std::string& arg : args) arg_ptrs.push_back(arg.data());
  const std::vector<char*> positional = absl::ParseCommandLine(
      static_cast<int>(arg_ptrs.size()), arg_ptrs.data());

  if (absl::GetFlag(FLAGS_help)) {
    const std::string text = HelpText(usage, ours);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::exit(0);
  }
  if (positional.size() > 1) {  // [0] is the program
    std::fprintf(stderr,
                 "%s: unexpected argument '%s': flags start with --, and "
                 "%s --help lists them\n",
                 usage.name.c_str(), positional[1], usage.name.c_str());
    std::exit(2);
  }
}

}  // namespace tensord::server
