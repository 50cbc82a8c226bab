// heed/json_read.h — checked reading of JSON values that came from a file.
//
// nlohmann's get<int64_t>() on a number that does not fit (6.5e33), is fractional (2.5) or is
// negative where an unsigned type is asked for is undefined behaviour, not an exception, and
// get<std::string>() on a number throws nlohmann's own exception. Everything heed reads from a
// configuration, a checkpoint or a state dict goes through these readers instead.
//
// Invariants:
//  * every reader either returns a value of the asked type within the asked bounds, or throws
//    heed::Error("heed::<op>: <source>: \"<path.key>\" is <value as JSON>, expected <what>");
//  * integers must be JSON integers (1e3 and 64.0 are rejected: heed never writes them), and
//    their range check happens before any conversion, so no value is ever truncated or wrapped;
//  * floating-point numbers must be finite (a JSON number too large for a double parses as
//    infinity) and within [min, max];
//  * a missing key is an error naming the key and listing the keys that are there.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace heed::io {

// The readers for one JSON value; `op` and `source` go into every message and `path` names the
// value ("model.d_model", "base_lrs[1]").
struct JsonPlace {
  std::string op;      // the reader, e.g. "translate::ModelConfig"
  std::string source;  // where the document came from, e.g. "run/translate.ckpt (config)"
  std::string path;    // the value inside it, e.g. "model.d_model"
};

int64_t json_integer(const nlohmann::json& value, const JsonPlace& place,
                     int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max());
uint64_t json_unsigned(const nlohmann::json& value, const JsonPlace& place,
                       uint64_t max = std::numeric_limits<uint64_t>::max());
double json_number(const nlohmann::json& value, const JsonPlace& place,
                   double min = -std::numeric_limits<double>::max(), double max = std::numeric_limits<double>::max());
bool json_boolean(const nlohmann::json& value, const JsonPlace& place);
std::string json_string(const nlohmann::json& value, const JsonPlace& place);
// An array of finite numbers in [min, max], optionally of an exact length (-1: any).
std::vector<double> json_numbers(const nlohmann::json& value, const JsonPlace& place,
                                 double min = -std::numeric_limits<double>::max(),
                                 double max = std::numeric_limits<double>::max(), int64_t length = -1);

// A JSON object read field by field:
//   io::JsonFields config(j, "translate::ModelConfig", "translate.ckpt (config)");
//   options.d_model = config.integer("d_model", 1, 65536);
class JsonFields {
 public:
  // heed::Error unless `object` is a JSON object. `object` must outlive this reader.
  JsonFields(const nlohmann::json& object, std::string op, std::string source, std::string path = "");

  bool has(std::string_view key) const;
  // The raw value; heed::Error naming the key (and the keys present) when it is missing.
  const nlohmann::json& value(std::string_view key) const;

  int64_t integer(std::string_view key, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  uint64_t unsigned_integer(std::string_view key, uint64_t max = std::numeric_limits<uint64_t>::max()) const;
  double number(std::string_view key, double min = -std::numeric_limits<double>::max(),
                double max = std::numeric_limits<double>::max()) const;
  bool boolean(std::string_view key) const;
  std::string string(std::string_view key) const;
  // An array of strings / of finite numbers in [min, max].
  std::vector<std::string> strings(std::string_view key) const;
  std::vector<double> numbers(std::string_view key, double min = -std::numeric_limits<double>::max(),
                              double max = std::numeric_limits<double>::max(), int64_t length = -1) const;
  // A nested object, read with the same op and source and a longer path.
  JsonFields object(std::string_view key) const;
  // A nested array (heed::Error unless it is one), with its place for reading the elements.
  const nlohmann::json& array(std::string_view key) const;
  JsonPlace place(std::string_view key) const;
  JsonPlace element_place(std::string_view key, size_t index) const;

  const nlohmann::json& json() const { return object_; }

 private:
  const nlohmann::json& object_;
  std::string op_, source_, path_;
};

}  // namespace heed::io
