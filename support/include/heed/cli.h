// heed/cli.h — strict command-line parsing for heed's examples and tools.
//
// Invariants: parse() never throws and never crashes on any argv; every flag value is
// validated (integers and doubles are parsed completely and range-checked, choices are
// checked); an error yields Outcome::Error with a one-line message naming the flag, and the
// programs exit with status 2 (usage) after printing "<program>: <message> (see --help)"
// (never the whole usage text, which would bury the one line that matters).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "heed/error.h"

namespace heed::cli {

class ArgParser {
 public:
  ArgParser(std::string program, std::string description);

  void add_flag(const std::string& name, bool* target, const std::string& help);
  void add_int(const std::string& name, int64_t* target, const std::string& help, int64_t min, int64_t max);
  void add_double(const std::string& name, double* target, const std::string& help, double min, double max);
  void add_string(const std::string& name, std::string* target, const std::string& help,
                  std::vector<std::string> choices = {});
  // Positional arguments, in order; `required` ones must be present.
  void add_positional(const std::string& name, std::string* target, const std::string& help, bool required = true);

  enum class Outcome { Ok, Help, Error };
  Outcome parse(int argc, const char* const* argv);
  const std::string& error() const { return error_; }
  // Names of the flags given on the command line (to tell defaults from explicit values).
  bool given(const std::string& name) const;
  std::string usage() const;

 private:
  struct Option {
    std::string name, help, kind;  // kind: flag, int, double, string
    bool* flag = nullptr;
    int64_t* int_value = nullptr;
    double* double_value = nullptr;
    std::string* string_value = nullptr;
    int64_t int_min = 0, int_max = 0;
    double double_min = 0, double_max = 0;
    std::vector<std::string> choices;
    std::string default_text;
  };
  struct Positional {
    std::string name, help;
    std::string* target;
    bool required;
  };
  bool apply(Option& option, const std::string& value);
  std::string program_, description_, error_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;
  std::vector<std::string> given_;
};

// A bad argument or combination of arguments found after parsing (e.g. --warmup above
// --iters, an unknown name in a list): run_guarded reports it as a usage error (status 2).
struct UsageError : heed::Error {
  explicit UsageError(const std::string& message) : heed::Error(message) {}
};
// Throws UsageError("<message>") when `ok` is false.
template <typename... Args>
void check_usage(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// Parses a comma-separated list of integers in [1, max_value] ("16,64,256") given to `flag`;
// an empty list, an empty item or anything else is a UsageError naming the flag and the item.
std::vector<int64_t> parse_positive_list(const std::string& flag, const std::string& text, int64_t max_value);

// Runs `body` and maps outcomes to exit statuses: UsageError prints "<program>: <message>"
// and gives 2; other heed::Error and std::exception print "<program>: error: <message>" and
// give 1.
int run_guarded(const std::string& program, const std::function<int()>& body);

}  // namespace heed::cli
