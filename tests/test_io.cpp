// tests/test_io.cpp — safetensors round trips and byte layout, the hardened loader against
// corrupted files, atomic writes and JSON files.
#include <doctest/doctest.h>
#include <heed/heed.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace heed;
namespace fs = std::filesystem;

namespace {

// A fresh directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("heed_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file assembled by hand: length prefix, header text as given, data.
std::string assemble(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

// The message of the heed::Error `f` throws ("" if it throws nothing; fails the test if it
// throws anything else).
std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected heed::Error, got another exception: " << e.what());
  } catch (...) {
    FAIL("expected heed::Error, got a non-standard exception");
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Checks that the bytes are rejected both from a file and from memory, with a message that
// names the op, the source and `problem`.
void check_rejected(const TempDir& dir, const std::string& bytes, const std::string& problem) {
  const std::string path = dir.file("corrupt.safetensors");
  write_bytes(path, bytes);
  const std::string from_file = error_message([&] { io::load_safetensors(path); });
  INFO("file error: " << from_file);
  CHECK(contains(from_file, "heed::load_safetensors: " + path + ": "));
  CHECK(contains(from_file, problem));
  const std::string from_memory = error_message(
      [&] { io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "buffer"); });
  INFO("memory error: " << from_memory);
  CHECK(contains(from_memory, "heed::load_safetensors: buffer: "));
  CHECK(contains(from_memory, problem));
}

// Values of any tensor in logical (row-major) order, as doubles.
std::vector<double> values_of(const Tensor& t) { return t.to_vector<double>(); }

Tensor random_tensor(const Dims& shape, DType dtype) {
  if (is_floating(dtype)) return randn(shape, TensorOptions(kFloat32)).to(dtype);
  if (dtype == kBool) return randint(0, 2, shape).to(kBool);
  return randint(-1000, 1000, shape).to(dtype);
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, 0-d, empty and non-contiguous tensors") {
  manual_seed(7);
  TempDir dir;
  const std::vector<DType> dtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
  const std::vector<Dims> shapes = {Dims{}, Dims{0}, Dims{5}, Dims{2, 3}, Dims{2, 0, 4}, Dims{1, 2, 3, 2}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dtype : dtypes) {
    for (size_t s = 0; s < shapes.size(); ++s)
      tensors.emplace_back(fmt::format("{}.shape{}", dtype_name(dtype), s), random_tensor(shapes[s], dtype));
    // Non-contiguous: a transpose and a strided slice.
    tensors.emplace_back(fmt::format("{}.transposed", dtype_name(dtype)), random_tensor({3, 4}, dtype).t());
    tensors.emplace_back(fmt::format("{}.strided", dtype_name(dtype)), random_tensor({4, 6}, dtype).slice(1, 1, 6, 2));
  }
  CHECK_FALSE(tensors.back().second.is_contiguous());
  // A tensor that requires grad is saved by value.
  tensors.emplace_back("param", randn({3}, kFloat64).requires_grad_());

  const std::string path = dir.file("all.safetensors");
  io::save_safetensors(path, tensors);
  const io::SafetensorsFile file = io::load_safetensors(path);
  REQUIRE(file.tensors.size() == tensors.size());
  CHECK(file.metadata.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, original] = tensors[i];
    INFO("tensor " << name);
    // Tensors are stored back to back in the given order, so they come back in that order.
    CHECK(file.tensors[i].first == name);
    const Tensor loaded = file.get(name);
    CHECK(loaded.dtype() == original.dtype());
    CHECK(loaded.shape() == original.shape());
    // (Tensor::is_contiguous wrongly reports some empty shapes like [2, 0, 4] as strided,
    // even for a fresh empty(); reported to the lead, so only non-empty tensors are checked.)
    if (loaded.numel() > 0) CHECK(loaded.is_contiguous());
    CHECK(loaded.device().is_cpu());
    CHECK_FALSE(loaded.requires_grad());
    CHECK(values_of(loaded) == values_of(original));
  }
  // The in-memory parser agrees with the file loader.
  const std::string bytes = read_bytes(path);
  const io::SafetensorsFile parsed =
      io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "memory");
  REQUIRE(parsed.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    CHECK(values_of(parsed.tensors[i].second) == values_of(tensors[i].second));
  CHECK(io::serialize_safetensors(tensors) == bytes);
}

TEST_CASE("safetensors: half-precision bit patterns survive exactly") {
  // Inf, -0, NaN, subnormal and max as raw float16 / bfloat16 bits.
  const std::vector<uint16_t> half_bits = {0x7c00, 0x8000, 0x7e01, 0x0001, 0x7bff, 0x3c00};
  const std::vector<uint16_t> bf16_bits = {0x7f80, 0x8000, 0x7fc1, 0x0001, 0x7f7f, 0x3f80};
  for (DType dtype : {kFloat16, kBFloat16}) {
    const auto& bits = dtype == kFloat16 ? half_bits : bf16_bits;
    Tensor t = empty({static_cast<int64_t>(bits.size())}, dtype);
    std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
    const std::string bytes = io::serialize_safetensors({{"x", t}});
    const Tensor back =
        io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem").get("x");
    REQUIRE(back.dtype() == dtype);
    CHECK(std::memcmp(back.raw_data(), bits.data(), bits.size() * 2) == 0);
  }
}

TEST_CASE("safetensors: metadata round trip") {
  TempDir dir;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "1200"}, {"note", "quotes \" and \\ and unicode \xc3\xa9"}, {"", ""}};
  const std::string path = dir.file("meta.safetensors");
  io::save_safetensors(path, {{"w", ones({2, 2})}}, metadata);
  const io::SafetensorsFile file = io::load_safetensors(path);
  CHECK(file.metadata == metadata);
  CHECK(file.contains("w"));
  CHECK_FALSE(file.contains("v"));
  // A file with metadata and no tensors.
  io::save_safetensors(path, {}, {{"only", "metadata"}});
  const io::SafetensorsFile only = io::load_safetensors(path);
  CHECK(only.tensors.empty());
  CHECK(only.metadata.at("only") == "metadata");
}

TEST_CASE("safetensors: the writer produces the exact byte layout") {
  TempDir dir;
  // Expected bytes assembled by hand: JSON header in insertion order, padded with spaces to a
  // multiple of 8, then float32 {1, -2.5}, int64 7 (0-d), and nothing for the empty float16.
  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                           R"("e":{"dtype":"F16","shape":[0],"data_offsets":[16,16]}})";
  std::string header = json;
  while (header.size() % 8 != 0) header += ' ';
  const unsigned char data[] = {0x00, 0x00, 0x80, 0x3f,                           // 1.0f
                                0x00, 0x00, 0x20, 0xc0,                           // -2.5f
                                0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};  // int64 7
  std::string expected;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) expected += static_cast<char>((n >> (8 * i)) & 0xff);
  expected += header;
  expected.append(reinterpret_cast<const char*>(data), sizeof data);

  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"b", tensor({1.0, -2.5}, kFloat32)}, {"a", scalar_tensor(7, kInt64)}, {"e", empty({0}, kFloat16)}};
  const std::string path = dir.file("layout.safetensors");
  io::save_safetensors(path, tensors, {{"format", "pt"}});
  CHECK(read_bytes(path) == expected);
  CHECK(io::serialize_safetensors(tensors, {{"format", "pt"}}) == expected);
  CHECK((8 + n) % 8 == 0);

  // And the loader reads a hand-assembled file (tensors returned in data order).
  const io::SafetensorsFile file = io::load_safetensors(path);
  REQUIRE(file.tensors.size() == 3);
  CHECK(file.tensors[0].first == "b");
  CHECK(file.tensors[1].first == "a");
  CHECK(file.get("b").to_vector<double>() == std::vector<double>{1.0, -2.5});
  CHECK(file.get("a").dim() == 0);
  CHECK(file.get("a").item<int64_t>() == 7);
  CHECK(file.get("e").shape() == Dims{0});
  CHECK(file.metadata.at("format") == "pt");
}

TEST_CASE("safetensors loader: header variants other writers produce are accepted") {
  TempDir dir;
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // float32 {1, 2}
  // Whitespace, key order, no padding, tensors listed out of data order.
  const std::string header =
      "{ \"y\" : {\"data_offsets\":[4,8], \"shape\":[1], \"dtype\":\"F32\"},\n"
      "  \"x\" : {\"shape\":[1],\"dtype\":\"F32\",\"data_offsets\":[0,4]} }";
  const std::string path = dir.file("variant.safetensors");
  write_bytes(path, assemble(header, data));
  const io::SafetensorsFile file = io::load_safetensors(path);
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors[0].first == "x");  // data order
  CHECK(file.get("x").item<float>() == 1.0f);
  CHECK(file.get("y").item<float>() == 2.0f);
}

TEST_CASE("safetensors loader: empty tensors on tile boundaries and files without data are accepted") {
  // Empty tensors at the start, between two tensors (either header order) and at the end.
  const std::string data(8, '\0');
  for (const std::string& header : {std::string(R"({"e0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                                                R"("e4":{"dtype":"I64","shape":[0,2],"data_offsets":[4,4]},)"
                                                R"("e8":{"dtype":"F64","shape":[3,0],"data_offsets":[8,8]}})"),
                                    std::string(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                R"("e4":{"dtype":"I64","shape":[0],"data_offsets":[4,4]},)"
                                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})")}) {
    CAPTURE(header);
    const std::string bytes = assemble(header, data);
    const io::SafetensorsFile file =
        io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
    CHECK(file.get("b").numel() == 1);
    CHECK(file.get("e4").numel() == 0);
  }
  const std::string no_data = assemble(R"({"__metadata__":{"k":"v"}})", "");
  CHECK(io::parse_safetensors(reinterpret_cast<const uint8_t*>(no_data.data()), no_data.size(), "mem").tensors.empty());
}

TEST_CASE("safetensors loader: every file of the fuzz seed corpus still parses") {
  // fuzz/corpus/{safetensors,checkpoint} hold files heed itself wrote (checkpoints are
  // safetensors files too): the tiling checks must accept all of them.
  size_t parsed = 0;
  for (const char* folder : {"safetensors", "checkpoint"}) {
    const fs::path root = fs::path(HEED_SOURCE_DIR) / "fuzz" / "corpus" / folder;
    REQUIRE(fs::is_directory(root));
    for (const auto& entry : fs::directory_iterator(root)) {
      if (!entry.is_regular_file()) continue;
      CAPTURE(entry.path().string());
      CHECK_NOTHROW(io::load_safetensors(entry.path().string()));
      ++parsed;
    }
  }
  CHECK(parsed >= 8);
}

TEST_CASE("safetensors loader: BOOL bytes other than 0/1 read as true") {
  const std::string bytes =
      assemble(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x00\x02\xff", 3));
  const Tensor m = io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem").get("m");
  const auto* raw = static_cast<const uint8_t*>(m.raw_data());
  CHECK(raw[0] == 0);
  CHECK(raw[1] == 1);
  CHECK(raw[2] == 1);
}

TEST_CASE("safetensors loader rejects corrupted files with a precise heed::Error") {
  TempDir dir;
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})";
  const std::string good_data(16, '\x01');
  const std::string good = assemble(good_header, good_data);
  {  // the untouched file loads
    const std::string path = dir.file("good.safetensors");
    write_bytes(path, good);
    CHECK(io::load_safetensors(path).tensors.size() == 2);
  }
  auto header_only = [&](const std::string& header, size_t data_bytes = 16) {
    return assemble(header, std::string(data_bytes, '\0'));
  };

  SUBCASE("truncated at several points") {
    check_rejected(dir, good.substr(0, 0), "shorter than the 8-byte header length");
    check_rejected(dir, good.substr(0, 5), "shorter than the 8-byte header length");
    check_rejected(dir, good.substr(0, 8), "larger than the rest of the file");
    check_rejected(dir, good.substr(0, 8 + good_header.size() / 2), "larger than the rest of the file");
    check_rejected(dir, good.substr(0, 8 + good_header.size()), "out of range");
    check_rejected(dir, good.substr(0, 8 + good_header.size() + 12), "out of range");
    check_rejected(dir, good.substr(0, good.size() - 1), "out of range");
  }
  SUBCASE("header length larger than the file") {
    check_rejected(dir, u64_le(good_header.size() + 100) + good_header + good_data, "larger than the rest of the file");
  }
  SUBCASE("huge header lengths") {
    check_rejected(dir, u64_le(uint64_t{1} << 63) + good_header + good_data, "larger than the rest of the file");
    check_rejected(dir, u64_le(~uint64_t{0}) + good_header, "larger than the rest of the file");
  }
  SUBCASE("header length above the cap") {
    // The bytes exist, so only the cap rejects them (checked without a 100 MB file: the memory
    // parser is handed a size that claims them, which must be refused before any read).
    const std::string prefix = u64_le(io::kMaxSafetensorsHeaderBytes + 1);
    std::string big(io::kMaxSafetensorsHeaderBytes + 16, ' ');
    std::memcpy(big.data(), prefix.data(), 8);
    const std::string message =
        error_message([&] { io::parse_safetensors(reinterpret_cast<const uint8_t*>(big.data()), big.size(), "big"); });
    CHECK(contains(message, "heed::load_safetensors: big: "));
    CHECK(contains(message, "exceeds the limit"));
  }
  SUBCASE("empty header") { check_rejected(dir, u64_le(0), "the header is empty"); }
  SUBCASE("bad JSON") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32",)"), "not valid JSON");
    check_rejected(dir, header_only(std::string("{\"a\"\x00}", 6)), "not valid JSON");
    check_rejected(dir, header_only("\xff\xfe{}"), "not valid JSON");
    check_rejected(dir, header_only(R"({"a":1e999})"), "not valid JSON");
  }
  SUBCASE("header is not an object / entries are not objects") {
    check_rejected(dir, header_only("[1,2,3]"), "must be a JSON object");
    check_rejected(dir, header_only(R"({"a":[0,8]})"), "entry must be an object");
  }
  SUBCASE("unknown and unsupported dtypes") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})"),
                   "unknown dtype 'F33'");
    check_rejected(dir, header_only(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})"),
                   "dtype 'U8' is not supported");
    check_rejected(dir, header_only(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})"), "dtype must be a string");
  }
  SUBCASE("negative, float and non-numeric shape entries") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"),
                   "shape entry 0 is -2");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})"),
                   "shape entry 0 is 2.0");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[1,"2"],"data_offsets":[0,8]}})"),
                   "shape entry 1 is \"2\"");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})"),
                   "shape must be an array");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})"),
                   "at most 8");
  }
  SUBCASE("shape products that overflow") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})"),
                   "overflow");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F64","shape":[1152921504606846976,16],"data_offsets":[0,8]}})"),
                   "overflow");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})"),
                   "too large");
  }
  SUBCASE("data_offsets out of range, reversed, malformed") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})"), "out of range");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), "begin > end");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})"),
                   "non-negative integers");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})"),
                   "data_offsets must be an array [begin, end]");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})"),
                   "out of range");
  }
  SUBCASE("byte count differs from shape x element size") {
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"), "size mismatch");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})"), "size mismatch");
  }
  SUBCASE("overlapping ranges") {
    check_rejected(dir,
                   header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
                   "overlapping");
    check_rejected(dir,
                   header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                               R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})"),
                   "overlapping");
  }
  SUBCASE("holes and trailing bytes: the data_offsets must tile the data section") {
    // A gap between two tensors, before the first one, and bytes after the last one.
    check_rejected(dir,
                   header_only(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
                   "bytes [4, 8) of the data section, between tensors 'a' and 'b', belong to no tensor");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
                   "bytes [0, 8) of the data section, before tensor 'a', belong to no tensor");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
                   "the data section holds 16 bytes but the tensors end at byte 8: 8 trailing bytes");
    check_rejected(dir, good + "x", "17 bytes but the tensors end at byte 16: 1 trailing bytes");
    check_rejected(dir, header_only(R"({"__metadata__":{"k":"v"}})", 3), "3 trailing bytes belong to no tensor");
    // An empty tensor inside another tensor's bytes.
    check_rejected(dir,
                   header_only(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                               R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})"),
                   "empty tensor 'e' at data offset 4 lies inside the bytes of tensor 'a' [0, 16]");
  }
  SUBCASE("metadata values must be strings") {
    check_rejected(dir, header_only(R"({"__metadata__":{"k":1}})"), "must be a string");
    check_rejected(dir, header_only(R"({"__metadata__":{"k":{"x":"y"}}})"), "must be a string");
    check_rejected(dir, header_only(R"({"__metadata__":["x"]})"), "__metadata__ must be an object");
  }
  SUBCASE("duplicate keys, missing and unexpected fields, deep nesting") {
    check_rejected(dir,
                   header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
                   "the key 'a' twice");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2]}})"), "missing 'data_offsets'");
    check_rejected(dir, header_only(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})"),
                   "unexpected key 'extra'");
    check_rejected(dir, header_only("{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}"),
                   "nests objects or arrays deeper");
  }
}

TEST_CASE("safetensors loader: missing files, directories and lookups") {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  const std::string m1 = error_message([&] { io::load_safetensors(missing); });
  CHECK(contains(m1, "heed::load_safetensors: " + missing));
  CHECK(contains(m1, "cannot open"));
  const std::string m2 = error_message([&] { io::load_safetensors(dir.path.string()); });
  CHECK(contains(m2, "not a regular file"));
  const io::SafetensorsFile file{{{"w", ones({1})}}, {}};
  const std::string m3 = error_message([&] { file.get("v"); });
  CHECK(contains(m3, "no tensor named 'v'"));
  CHECK(contains(m3, "w"));
  // A null pointer with a size is refused, an empty buffer is "truncated".
  CHECK(contains(error_message([] { io::parse_safetensors(nullptr, 8, "np"); }), "null data pointer"));
  CHECK(contains(error_message([] { io::parse_safetensors(nullptr, 0, "empty"); }), "shorter than the 8-byte"));
}

TEST_CASE("save_safetensors refuses duplicate, reserved and undefined entries") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string m1 = error_message([&] { io::save_safetensors(path, {{"w", ones({1})}, {"w", zeros({2})}}); });
  CHECK(contains(m1, "heed::save_safetensors"));
  CHECK(contains(m1, "'w' appears more than once"));
  const std::string m2 = error_message([&] { io::save_safetensors(path, {{"__metadata__", ones({1})}}); });
  CHECK(contains(m2, "reserved"));
  const std::string m3 = error_message([&] { io::save_safetensors(path, {{"u", Tensor()}}); });
  CHECK(contains(m3, "undefined"));
  const std::string m4 = error_message([&] { io::save_safetensors(path, {{"bad\xff", ones({1})}}); });
  CHECK(contains(m4, "UTF-8"));
  CHECK_FALSE(fs::exists(path));  // nothing was written
}

TEST_CASE("write_file_atomic keeps the old file when the writer fails") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  io::write_file_atomic(path, std::string_view("old contents"));
  CHECK(read_bytes(path) == "old contents");

  // The writer throws halfway through: its exception propagates, the old file is intact and
  // no temporary is left behind.
  CHECK_THROWS_AS(io::write_file_atomic(path,
                                        [](std::ostream& out) {
                                          out << std::string(200000, 'x');  // past the buffer
                                          throw std::runtime_error("disk on fire");
                                        }),
                  std::runtime_error);
  CHECK(read_bytes(path) == "old contents");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  // A failing save_safetensors (bad input) leaves the old file too.
  CHECK_THROWS_AS(io::save_safetensors(path, {{"w", Tensor()}}), Error);
  CHECK(read_bytes(path) == "old contents");

  // A successful write replaces it.
  io::write_file_atomic(path, [](std::ostream& out) { out << "new"; });
  CHECK(read_bytes(path) == "new");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  // A writer that throws on a path with no previous file leaves nothing.
  const std::string fresh = dir.file("fresh.bin");
  CHECK_THROWS_AS(io::write_file_atomic(fresh, [](std::ostream&) { throw Error("stop"); }), Error);
  CHECK_FALSE(fs::exists(fresh));

  // I/O failures are heed::Errors naming the op and the path.
  const std::string nowhere = dir.file("no/such/dir/file.bin");
  const std::string message = error_message([&] { io::write_file_atomic(nowhere, "x"); });
  CHECK(contains(message, "heed::write_file_atomic: " + nowhere));
  const std::string onto_directory = error_message([&] { io::write_file_atomic(dir.path.string(), "x"); });
  CHECK(contains(onto_directory, "heed::write_file_atomic"));
  CHECK(fs::is_directory(dir.path));
}

TEST_CASE("save_json / load_json") {
  TempDir dir;
  const std::string path = dir.file("config.json");
  const nlohmann::json value = {{"lr", 3e-4}, {"steps", 2000}, {"name", "lm"}, {"betas", {0.9, 0.95}}};
  io::save_json(path, value);
  CHECK(io::load_json(path) == value);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  write_bytes(path, "{\n  \"lr\": 0.1,\n  \"steps\": }\n");
  const std::string message = error_message([&] { io::load_json(path); });
  CHECK(contains(message, "heed::load_json: " + path));
  CHECK(contains(message, "at byte 27"));  // the '}' where a value was expected
  const std::string missing = dir.file("missing.json");
  const std::string m2 = error_message([&] { io::load_json(missing); });
  CHECK(contains(m2, "heed::load_json: " + missing));
  const std::string m3 = error_message([&] { io::save_json(path, nlohmann::json("bad\xff")); });
  CHECK(contains(m3, "heed::save_json"));
}
