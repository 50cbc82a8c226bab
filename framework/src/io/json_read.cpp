// json_read.cpp — checked JSON readers (see heed/json_read.h). No nlohmann conversion runs on a
// value before its type and range have been checked here.
#include "heed/json_read.h"

#include <cmath>
#include <limits>
#include <utility>

#include "heed/error.h"

namespace heed::io {

namespace {

using Json = nlohmann::json;

// The value as the user would see it in the file, cut short for messages.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

[[noreturn]] void reject(const JsonPlace& place, const Json& value, const std::string& expected) {
  fail(place.op, "{}: \"{}\" is {}, expected {}", place.source, place.path, shown(value), expected);
}

std::string joined(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

}  // namespace

int64_t json_integer(const Json& value, const JsonPlace& place, int64_t min, int64_t max) {
  const auto expected = [&] { return fmt::format("an integer in [{}, {}]", min, max); };
  if (value.is_number_unsigned()) {  // non-negative; may exceed INT64_MAX
    const uint64_t u = value.get<uint64_t>();
    if (max < 0 || u > static_cast<uint64_t>(max)) reject(place, value, expected());
    const auto i = static_cast<int64_t>(u);
    if (i < min) reject(place, value, expected());
    return i;
  }
  if (value.is_number_integer()) {  // stored as int64
    const int64_t i = value.get<int64_t>();
    if (i < min || i > max) reject(place, value, expected());
    return i;
  }
  reject(place, value, expected());
}

uint64_t json_unsigned(const Json& value, const JsonPlace& place, uint64_t max) {
  const auto expected = [&] { return fmt::format("an integer in [0, {}]", max); };
  uint64_t u = 0;
  if (value.is_number_unsigned()) {
    u = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    const int64_t i = value.get<int64_t>();
    if (i < 0) reject(place, value, expected());
    u = static_cast<uint64_t>(i);
  } else {
    reject(place, value, expected());
  }
  if (u > max) reject(place, value, expected());
  return u;
}

double json_number(const Json& value, const JsonPlace& place, double min, double max) {
  const auto expected = [&] {
    const double limit = std::numeric_limits<double>::max();
    if (min == -limit && max == limit) return std::string("a finite number");
    return fmt::format("a finite number in [{}, {}]", min, max);
  };
  if (!value.is_number()) reject(place, value, expected());
  double d = 0.0;
  if (value.is_number_float())
    d = value.get<double>();
  else if (value.is_number_unsigned())
    d = static_cast<double>(value.get<uint64_t>());
  else
    d = static_cast<double>(value.get<int64_t>());
  if (!std::isfinite(d) || d < min || d > max) reject(place, value, expected());
  return d;
}

bool json_boolean(const Json& value, const JsonPlace& place) {
  if (!value.is_boolean()) reject(place, value, "true or false");
  return value.get<bool>();
}

std::string json_string(const Json& value, const JsonPlace& place) {
  if (!value.is_string()) reject(place, value, "a string");
  return value.get<std::string>();
}

std::vector<double> json_numbers(const Json& value, const JsonPlace& place, double min, double max, int64_t length) {
  if (!value.is_array() || (length >= 0 && value.size() != static_cast<size_t>(length)))
    reject(place, value,
           length >= 0 ? fmt::format("an array of {} numbers", length) : std::string("an array of numbers"));
  std::vector<double> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i)
    out.push_back(json_number(value[i], {place.op, place.source, fmt::format("{}[{}]", place.path, i)}, min, max));
  return out;
}

// ---- JsonFields -------------------------------------------------------------------------------

JsonFields::JsonFields(const Json& object, std::string op, std::string source, std::string path)
    : object_(object), op_(std::move(op)), source_(std::move(source)), path_(std::move(path)) {
  if (!object_.is_object()) {
    if (path_.empty()) fail(op_, "{}: expected a JSON object, got {}", source_, shown(object_));
    reject({op_, source_, path_}, object_, "a JSON object");
  }
}

bool JsonFields::has(std::string_view key) const { return object_.contains(key); }

const Json& JsonFields::value(std::string_view key) const {
  const auto it = object_.find(key);
  if (it == object_.end()) {
    std::string keys;
    for (const auto& [k, v] : object_.items()) keys += (keys.empty() ? "" : ", ") + k;
    fail(op_, "{}: \"{}\" is missing (the object has: {})", source_, joined(path_, key),
         keys.empty() ? "no keys" : keys);
  }
  return *it;
}

JsonPlace JsonFields::place(std::string_view key) const { return {op_, source_, joined(path_, key)}; }

JsonPlace JsonFields::element_place(std::string_view key, size_t index) const {
  return {op_, source_, fmt::format("{}[{}]", joined(path_, key), index)};
}

int64_t JsonFields::integer(std::string_view key, int64_t min, int64_t max) const {
  return json_integer(value(key), place(key), min, max);
}

uint64_t JsonFields::unsigned_integer(std::string_view key, uint64_t max) const {
  return json_unsigned(value(key), place(key), max);
}

double JsonFields::number(std::string_view key, double min, double max) const {
  return json_number(value(key), place(key), min, max);
}

bool JsonFields::boolean(std::string_view key) const { return json_boolean(value(key), place(key)); }

std::string JsonFields::string(std::string_view key) const { return json_string(value(key), place(key)); }

const Json& JsonFields::array(std::string_view key) const {
  const Json& v = value(key);
  if (!v.is_array()) reject(place(key), v, "an array");
  return v;
}

std::vector<std::string> JsonFields::strings(std::string_view key) const {
  const Json& items = array(key);
  std::vector<std::string> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) out.push_back(json_string(items[i], element_place(key, i)));
  return out;
}

std::vector<double> JsonFields::numbers(std::string_view key, double min, double max, int64_t length) const {
  return json_numbers(value(key), place(key), min, max, length);
}

JsonFields JsonFields::object(std::string_view key) const {
  return JsonFields(value(key), op_, source_, joined(path_, key));
}

}  // namespace heed::io
