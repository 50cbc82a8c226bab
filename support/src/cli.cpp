// support/src/cli.cpp — strict command-line parsing (see heed/cli.h).
#include "heed/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "heed/error.h"

namespace heed::cli {

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void ArgParser::add_flag(const std::string& name, bool* target, const std::string& help) {
  Option o;
  o.name = name;
  o.help = help;
  o.kind = "flag";
  o.flag = target;
  options_.push_back(o);
}

void ArgParser::add_int(const std::string& name, int64_t* target, const std::string& help, int64_t min, int64_t max) {
  Option o;
  o.name = name;
  o.help = help;
  o.kind = "int";
  o.int_value = target;
  o.int_min = min;
  o.int_max = max;
  o.default_text = std::to_string(*target);
  options_.push_back(o);
}

void ArgParser::add_double(const std::string& name, double* target, const std::string& help, double min, double max) {
  Option o;
  o.name = name;
  o.help = help;
  o.kind = "double";
  o.double_value = target;
  o.double_min = min;
  o.double_max = max;
  o.default_text = fmt::format("{:g}", *target);
  options_.push_back(o);
}

void ArgParser::add_string(const std::string& name, std::string* target, const std::string& help,
                           std::vector<std::string> choices) {
  Option o;
  o.name = name;
  o.help = help;
  o.kind = "string";
  o.string_value = target;
  o.choices = std::move(choices);
  o.default_text = *target;
  options_.push_back(o);
}

void ArgParser::add_positional(const std::string& name, std::string* target, const std::string& help, bool required) {
  positionals_.push_back({name, help, target, required});
}

bool ArgParser::given(const std::string& name) const {
  for (const std::string& g : given_)
    if (g == name) return true;
  return false;
}

bool ArgParser::apply(Option& o, const std::string& value) {
  if (o.kind == "int") {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || v < o.int_min || v > o.int_max) {
      error_ = fmt::format("--{} expects an integer in [{}, {}], got '{}'", o.name, o.int_min, o.int_max, value);
      return false;
    }
    *o.int_value = v;
  } else if (o.kind == "double") {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(v) ||
        v < o.double_min || v > o.double_max) {
      error_ =
          fmt::format("--{} expects a number in [{:g}, {:g}], got '{}'", o.name, o.double_min, o.double_max, value);
      return false;
    }
    *o.double_value = v;
  } else {
    if (!o.choices.empty()) {
      bool ok = false;
      for (const std::string& c : o.choices) ok = ok || c == value;
      if (!ok) {
        error_ = fmt::format("--{} expects one of {}, got '{}'", o.name, fmt::join(o.choices, "|"), value);
        return false;
      }
    }
    *o.string_value = value;
  }
  return true;
}

ArgParser::Outcome ArgParser::parse(int argc, const char* const* argv) {
  error_.clear();
  given_.clear();
  size_t positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h") return Outcome::Help;
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2), value;
      bool has_value = false;
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      Option* option = nullptr;
      for (Option& o : options_)
        if (o.name == name) option = &o;
      if (!option) {
        error_ = fmt::format("unknown option '--{}'", name);
        return Outcome::Error;
      }
      given_.push_back(name);
      if (option->kind == "flag") {
        if (has_value) {
          error_ = fmt::format("--{} takes no value", name);
          return Outcome::Error;
        }
        *option->flag = true;
        continue;
      }
      if (!has_value) {
        if (i + 1 >= argc || !argv[i + 1]) {
          error_ = fmt::format("--{} needs a value", name);
          return Outcome::Error;
        }
        value = argv[++i];
      }
      if (!apply(*option, value)) return Outcome::Error;
      continue;
    }
    if (positional >= positionals_.size()) {
      error_ = fmt::format("unexpected argument '{}'", arg);
      return Outcome::Error;
    }
    *positionals_[positional++].target = arg;
  }
  for (size_t p = positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) {
      error_ = fmt::format("missing argument {}", positionals_[p].name);
      return Outcome::Error;
    }
  }
  return Outcome::Ok;
}

std::string ArgParser::usage() const {
  std::string out = "usage: " + program_;
  for (const Positional& p : positionals_) out += p.required ? " " + p.name : " [" + p.name + "]";
  out += " [options]\n\n" + description_ + "\n";
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const Positional& p : positionals_) out += fmt::format("  {:<24} {}\n", p.name, p.help);
  }
  out += "\noptions:\n";
  for (const Option& o : options_) {
    std::string left = "--" + o.name;
    if (o.kind == "int") left += " N";
    if (o.kind == "double") left += " X";
    if (o.kind == "string")
      left += o.choices.empty() ? " TEXT" : " {" + fmt::format("{}", fmt::join(o.choices, "|")) + "}";
    std::string right = o.help;
    if (!o.default_text.empty() && o.kind != "flag") right += " (default " + o.default_text + ")";
    out += fmt::format("  {:<24} {}\n", left, right);
  }
  out += fmt::format("  {:<24} {}\n", "--help", "show this help and exit");
  return out;
}

int run_guarded(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program.c_str(), e.what());
    return 2;
  } catch (const heed::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
  }
  return 1;
}

std::vector<int64_t> parse_positive_list(const std::string& flag, const std::string& text, int64_t max_value) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const long long value = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    check_usage(!item.empty() && end && *end == '\0' && errno == 0 && value >= 1 && value <= max_value,
                "{}: '{}' is not an integer from 1 to {}", flag, item, max_value);
    values.push_back(value);
    start = comma + 1;
  }
  return values;
}

}  // namespace heed::cli
