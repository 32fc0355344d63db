// The command line of our programs (tensord and the benchmarks): absl flags
// with a --help that lists the program's own flags with their defaults and
// exits 0, --version, either spelling of a flag name, and no stray words.
//
// absl's own --help (20220623) lists only flags defined in a file named
// after the binary ("tensord.cc"), so for ours it printed "No flags
// matched", and it exits 1 after any help. This module registers a `help`
// flag of its own, which absl then parses as an ordinary flag, and prints
// the listing itself through absl's public reflection API. Linking it (it
// is pulled in by a call to ParseProgramFlags) is what defines --help: a
// program that parses its flags with absl::ParseCommandLine directly keeps
// absl's behaviour.
//
// Thread-safety: call from main only, once, before other threads read
// flags.
#ifndef TENSORD_SERVER_PROGRAM_FLAGS_H_
#define TENSORD_SERVER_PROGRAM_FLAGS_H_

#include <string>
#include <vector>

namespace tensord::server {

// What --help, --helpfull and --version say about a program.
struct ProgramUsage {
  // The program as typed: "tensord", "tensord-bench".
  std::string name;
  // One paragraph: what the program is and does. No leading program name.
  std::string summary;
  // An example command line, starting with the name.
  std::string example;
  // The source files whose ABSL_FLAGs are the program's own, the ones
  // --help lists: pass __FILE__ from each.
  std::vector<std::string> flag_files;
};

// Parses argv into the absl flags, as absl::ParseCommandLine does, after
// turning dashes in flag names into underscores (NormalizeFlagSpelling in
// server/config.h), so --session-ttl and --session_ttl both work. Then:
//  --help      prints the summary, a usage line, the example and the
//              program's own flags (dashed names), each with its default
//              and, where something set it before this call (tensord's
//              config file or environment), its current value; to stdout,
//              exit 0;
//  --version   prints "<name> <version>", exit 0;
//  --helpfull, --helpshort, --helpmatch=S (or --help=S), --helpon=F
//              absl's listings (--helpfull: every flag, gRPC's and absl's
//              too); absl exits 1 after them;
//  an unknown flag or a bad value: absl's message on stderr, exit 1;
//  a positional argument (none of our programs takes one): a message on
//  stderr, exit 2.
// Returns only when the program should run.
void ParseProgramFlags(int argc, char** argv, const ProgramUsage& usage);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_PROGRAM_FLAGS_H_
