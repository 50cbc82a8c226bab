// examples/common/main_guard.h — the end of the examples' main(): parse the command line,
// then run the program with heed's exit statuses (one copy instead of one per example).
//
// Invariants: --help prints the usage to stdout and gives 0; a command line the ArgParser
// rejects prints "<program>: <error>", a blank line and the usage to stderr and gives 2;
// otherwise `body` runs under cli::run_guarded, which gives body's own status, 2 for a
// cli::UsageError ("<program>: <message> (see --help)") and 1 for any other heed::Error or
// std::exception ("<program>: error: <message>"). Header-only: nothing extra to link.
#pragma once

#include <heed/cli.h>

#include <cstdio>
#include <functional>
#include <string>

namespace examples {

inline int parse_and_run(heed::cli::ArgParser& args, const std::string& program, int argc, char** argv,
                         const std::function<int()>& body) {
  switch (args.parse(argc, argv)) {
    case heed::cli::ArgParser::Outcome::Help:
      std::printf("%s", args.usage().c_str());
      return 0;
    case heed::cli::ArgParser::Outcome::Error:
      std::fprintf(stderr, "%s: %s (see --help)\n", program.c_str(), args.error().c_str());
      return 2;
    case heed::cli::ArgParser::Outcome::Ok:
      break;
  }
  return heed::cli::run_guarded(program, body);
}

}  // namespace examples
