// framework/src/io/io.cpp — safetensors writer and hardened reader, JSON files, atomic replace.
//
// Invariants: the reader checks every number of the header before using it (header length
// against the file and a cap, dtype, shape, offsets against the data size, byte counts
// against shape x element size with overflow checks, ranges disjoint and tiling the data
// section exactly: no holes, no trailing bytes) and only then reads tensor bytes, each range
// inside the data section; writes go through write_file_atomic, which also removes the
// temporaries of writers that died before their rename (the file's pid no longer exists).
#include "heed/io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <system_error>

#include "heed/autograd.h"
#include "heed/ops.h"

static_assert(std::endian::native == std::endian::little,
              "heed's safetensors I/O copies raw bytes and needs a little-endian host");

namespace heed::io {

namespace {

using Json = nlohmann::json;

std::string errno_text(int error) { return std::generic_category().message(error); }

// Closes a file descriptor on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// A buffered std::streambuf writing to a file descriptor; remembers the first errno.
class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd) : fd_(fd), buffer_(kBufferBytes) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return flush_buffer() ? 0 : -1; }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(buffer_.size())) return std::streambuf::xsputn(s, n);
    // Large blocks (tensor data) bypass the buffer.
    if (!flush_buffer() || !write_all(s, static_cast<size_t>(n))) return 0;
    return n;
  }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 16;
  bool flush_buffer() {
    const size_t pending = static_cast<size_t>(pptr() - pbase());
    if (pending > 0 && !write_all(pbase(), pending)) return false;
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return true;
  }
  bool write_all(const char* p, size_t n) {
    if (error_ != 0) return false;
    while (n > 0) {
      const ssize_t written = ::write(fd_, p, n);
      if (written < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += written;
      n -= static_cast<size_t>(written);
    }
    return true;
  }
  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Opens `path` for reading and checks it is a regular file; returns the fd and its size.
std::pair<int, uint64_t> open_regular_file(const std::string& path, const char* op) {
  HEED_CHECK(!path.empty(), op, "the path is empty");
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(op, "{}: cannot open the file: {}", path, errno_text(errno));
  FdCloser closer(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(op, "{}: cannot stat the file: {}", path, errno_text(errno));
  HEED_CHECK(S_ISREG(info.st_mode), op, "{}: is not a regular file{}", path,
             S_ISDIR(info.st_mode) ? " (it is a directory)" : "");
  return {closer.release(), static_cast<uint64_t>(info.st_size)};
}

// Reads exactly n bytes at `offset`, or throws naming what was read.
void pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path, const char* op) {
  char* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, out + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(op, "{}: read of {} bytes at offset {} failed: {}", path, n, offset, errno_text(errno));
    }
    if (got == 0)
      fail(op, "{}: unexpected end of file: wanted {} bytes at offset {}, got {} (truncated?)", path, n, offset, done);
    done += static_cast<uint64_t>(got);
  }
}

}  // namespace

// ---- atomic writes --------------------------------------------------------------------------

namespace {

// Removes `<name>.tmp.<pid>` files next to `path` whose writer process no longer exists (a
// writer killed between creating its temporary and the rename, e.g. by SIGKILL or a power
// cut). A temporary whose pid is alive (or cannot be signalled: another user's process) is
// left alone: it may be a concurrent writer on this machine; one whose pid was reused by an
// unrelated process stays until a later save finds that pid gone. Best effort: errors are
// ignored, the save itself must not fail because of leftovers.
void remove_stale_temporaries(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  const pid_t self = ::getpid();
  std::error_code error;
  std::filesystem::directory_iterator it(parent_directory(path), error), end;
  for (; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == self) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code ignored;
    if (it->is_regular_file(ignored)) std::filesystem::remove(it->path(), ignored);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer) {
  constexpr const char* kOp = "write_file_atomic";
  HEED_CHECK(!path.empty(), kOp, "the path is empty");
  remove_stale_temporaries(path);
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  int raw_fd;
  do {
    raw_fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (raw_fd < 0 && errno == EINTR);
  if (raw_fd < 0) fail(kOp, "{}: cannot create the temporary file {}: {}", path, temporary, errno_text(errno));
  FdCloser fd(raw_fd);
  // Removes the temporary on every failure path (writer exceptions included).
  struct TemporaryRemover {
    const std::string& name;
    bool armed = true;
    ~TemporaryRemover() {
      if (armed) ::unlink(name.c_str());
    }
  } remover{temporary};

  // Keep the permissions of the file being replaced.
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && S_ISREG(existing.st_mode))
    (void)::fchmod(fd.get(), existing.st_mode & 07777);

  {
    FdStreamBuf buffer(fd.get());
    std::ostream stream(&buffer);
    writer(stream);
    stream.flush();
    if (buffer.error() != 0) fail(kOp, "{}: writing {} failed: {}", path, temporary, errno_text(buffer.error()));
    HEED_CHECK(stream.good(), kOp, "{}: the stream writing {} reported an error", path, temporary);
  }
  if (::fsync(fd.get()) != 0) fail(kOp, "{}: fsync of {} failed: {}", path, temporary, errno_text(errno));
  if (::close(fd.release()) != 0) fail(kOp, "{}: closing {} failed: {}", path, temporary, errno_text(errno));
  if (::rename(temporary.c_str(), path.c_str()) != 0)
    fail(kOp, "{}: cannot rename {} over it: {}", path, temporary, errno_text(errno));
  remover.armed = false;

  // Make the rename itself durable.
  const std::string directory = parent_directory(path);
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0)
    fail(kOp, "{}: the file was replaced, but its directory {} cannot be opened to fsync it: {}", path, directory,
         errno_text(errno));
  FdCloser dir_closer(dir_fd);
  if (::fsync(dir_fd) != 0 && errno != EINVAL && errno != EROFS)
    fail(kOp, "{}: the file was replaced, but fsync of its directory {} failed: {}", path, directory,
         errno_text(errno));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(
      path, [bytes](std::ostream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
}

std::string read_file(const std::string& path) {
  constexpr const char* kOp = "read_file";
  auto [raw_fd, size] = open_regular_file(path, kOp);
  FdCloser fd(raw_fd);
  std::string bytes;
  bytes.reserve(static_cast<size_t>(size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(kOp, "{}: read failed: {}", path, errno_text(errno));
    }
    if (got == 0) break;
    bytes.append(chunk, static_cast<size_t>(got));
  }
  return bytes;
}

// ---- JSON -----------------------------------------------------------------------------------

void save_json(const std::string& path, const nlohmann::json& value) {
  std::string text;
  try {
    text = value.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    fail("save_json", "{}: cannot serialize the value: {}", path, e.what());
  }
  write_file_atomic(path, text);
}

nlohmann::json load_json(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    // Re-label under this op; the message already names the path and the reason.
    std::string message = e.what();
    const std::string prefix = "heed::read_file: ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    fail("load_json", "{}", message);
  }
  return parse_json(text, path);
}

namespace {
struct JsonTooDeep {};
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& name_for_errors) {
  // nlohmann parses iteratively but copies, compares and dumps values recursively, so a
  // hostile document nested a million levels deep would overflow the stack later on.
  auto limit_depth = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) -> bool {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw JsonTooDeep{};
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit_depth);
  } catch (const JsonTooDeep&) {
    fail("load_json", "{}: invalid JSON: objects and arrays nest deeper than {} levels", name_for_errors,
         kMaxJsonDepth);
  } catch (const nlohmann::json::parse_error& e) {
    fail("load_json", "{}: invalid JSON at byte {}: {}", name_for_errors, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    fail("load_json", "{}: invalid JSON: {}", name_for_errors, e.what());
  }
}

// ---- safetensors: dtypes --------------------------------------------------------------------

namespace {

struct SafetensorsDType {
  std::string_view name;
  DType dtype;
};
constexpr SafetensorsDType kSafetensorsDTypes[] = {{"F32", kFloat32},   {"F64", kFloat64}, {"F16", kFloat16},
                                                   {"BF16", kBFloat16}, {"I32", kInt32},   {"I64", kInt64},
                                                   {"BOOL", kBool}};
// Valid safetensors dtypes that heed tensors cannot hold.
constexpr std::string_view kUnsupportedSafetensorsDTypes[] = {
    "U8", "I8", "U16", "I16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& entry : kSafetensorsDTypes)
    if (entry.dtype == dtype) return entry.name;
  fail("save_safetensors", "dtype {} has no safetensors name", dtype_name(dtype));
}

// ---- safetensors: writing -------------------------------------------------------------------

namespace {

constexpr const char* kMetadataKey = "__metadata__";

struct PreparedSafetensors {
  std::string header;                  // JSON padded with spaces to a multiple of 8
  std::vector<const Tensor*> tensors;  // in data order
  std::vector<uint64_t> byte_counts;
};

PreparedSafetensors prepare_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                        const std::map<std::string, std::string>& metadata, const char* op) {
  // The header is assembled as text (linear in the number of tensors, keys in the given order):
  // {"__metadata__":{...},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...}
  PreparedSafetensors prepared;
  std::string& header = prepared.header;
  header = "{";
  try {
    if (!metadata.empty()) header += fmt::format("\"{}\":{},", kMetadataKey, Json(metadata).dump());
    std::set<std::string> seen;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
      HEED_CHECK(name != kMetadataKey, op, "'{}' is reserved for the metadata and cannot name a tensor", kMetadataKey);
      HEED_CHECK(seen.insert(name).second, op, "the tensor name '{}' appears more than once", name);
      HEED_CHECK(tensor.defined(), op, "the tensor '{}' is an undefined Tensor", name);
      const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
      header +=
          fmt::format(R"({}:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}},)", Json(name).dump(),
                      safetensors_dtype_name(tensor.dtype()), fmt::join(tensor.shape(), ","), offset, offset + bytes);
      prepared.tensors.push_back(&tensor);
      prepared.byte_counts.push_back(bytes);
      offset += bytes;
    }
  } catch (const nlohmann::json::exception& e) {
    fail(op, "the header cannot be written as JSON (names and metadata must be UTF-8): {}", e.what());
  }
  if (header.back() == ',') header.pop_back();
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  return prepared;
}

void write_safetensors(std::ostream& out, const PreparedSafetensors& prepared) {
  const uint64_t header_length = prepared.header.size();
  char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<char>((header_length >> (8 * i)) & 0xff);
  out.write(length_bytes, 8);
  out.write(prepared.header.data(), static_cast<std::streamsize>(prepared.header.size()));
  for (size_t i = 0; i < prepared.tensors.size(); ++i) {
    if (prepared.byte_counts[i] == 0) continue;
    Tensor host = prepared.tensors[i]->detach();
    if (!host.device().is_cpu()) host = host.to(kCPU);
    host = host.contiguous();
    out.write(static_cast<const char*>(host.raw_data()), static_cast<std::streamsize>(prepared.byte_counts[i]));
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const PreparedSafetensors prepared = prepare_safetensors(tensors, metadata, "save_safetensors");
  write_file_atomic(path, [&](std::ostream& out) { write_safetensors(out, prepared); });
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  const PreparedSafetensors prepared = prepare_safetensors(tensors, metadata, "serialize_safetensors");
  std::ostringstream out;
  write_safetensors(out, prepared);
  return std::move(out).str();
}

// ---- safetensors: reading -------------------------------------------------------------------

namespace {

constexpr const char* kLoadOp = "load_safetensors";

template <typename... Args>
[[noreturn]] void reject(const std::string& source, fmt::format_string<Args...> format, Args&&... args) {
  fail(kLoadOp, "{}: {}", source, fmt::format(format, std::forward<Args>(args)...));
}

struct HeaderEntry {
  std::string name;
  DType dtype = kFloat32;
  Dims shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct ParsedHeader {
  std::vector<HeaderEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
};

// Thrown by the JSON callback; converted to a heed::Error by parse_header.
struct HeaderStructureProblem {
  std::string message;
};

// Parses the header JSON, refusing duplicate keys and containers nested deeper than a
// safetensors header has (root object > tensor object > shape/offsets array). `root_keys`
// gets the top-level keys in header order (the parsed object itself is sorted by key).
Json parse_header_json(std::string_view text, const std::string& source, std::vector<std::string>& root_keys) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    using Event = Json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= 3)
          throw HeaderStructureProblem{
              "the header nests objects or arrays deeper than a "
              "safetensors header can (shape and data_offsets hold "
              "numbers only)"};
        if (event == Event::object_start) keys_of_open_objects.emplace_back();
        break;
      case Event::object_end:
        if (!keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
        break;
      case Event::key:
        if (!keys_of_open_objects.empty() && !keys_of_open_objects.back().insert(parsed.get<std::string>()).second)
          throw HeaderStructureProblem{
              fmt::format("the header has the key '{}' twice in one object", parsed.get<std::string>())};
        if (depth == 1) root_keys.push_back(parsed.get<std::string>());
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const HeaderStructureProblem& problem) {
    reject(source, "{}", problem.message);
  } catch (const nlohmann::json::parse_error& e) {
    reject(source, "the header is not valid JSON (at byte {} of the header): {}", e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    reject(source, "the header is not valid JSON: {}", e.what());
  }
}

DType parse_dtype(const Json& value, const std::string& name, const std::string& source) {
  if (!value.is_string()) reject(source, "tensor '{}': dtype must be a string, got {}", name, value.type_name());
  const auto& text = value.get_ref<const std::string&>();
  for (const auto& entry : kSafetensorsDTypes)
    if (entry.name == text) return entry.dtype;
  for (std::string_view unsupported : kUnsupportedSafetensorsDTypes)
    if (unsupported == text)
      reject(source,
             "tensor '{}': dtype '{}' is not supported by heed (F32, F64, F16, BF16, I32, "
             "I64 and BOOL are)",
             name, text);
  reject(source, "tensor '{}': unknown dtype '{}' (expected F32, F64, F16, BF16, I32, I64 or BOOL)", name, text);
}

// A JSON number that is a non-negative integer fitting in uint64, or nothing.
bool as_unsigned(const Json& value, uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

Dims parse_shape(const Json& value, const std::string& name, const std::string& source) {
  if (!value.is_array())
    reject(source, "tensor '{}': shape must be an array of integers, got {}", name, value.type_name());
  if (value.size() > static_cast<size_t>(kMaxDims))
    reject(source, "tensor '{}': shape has {} dimensions, heed tensors have at most {}", name, value.size(), kMaxDims);
  Dims shape;
  for (size_t i = 0; i < value.size(); ++i) {
    uint64_t size = 0;
    if (!as_unsigned(value[i], size))
      reject(source, "tensor '{}': shape entry {} is {}, expected a non-negative integer", name, i, value[i].dump());
    if (size > static_cast<uint64_t>(INT64_MAX))
      reject(source, "tensor '{}': shape entry {} ({}) is too large", name, i, size);
    shape.push_back(static_cast<int64_t>(size));
  }
  // Every stride (product of the sizes, zero sizes counted as 1) must fit in int64 too.
  int64_t strides_product = 1;
  for (int64_t size : shape) {
    if (__builtin_mul_overflow(strides_product, std::max<int64_t>(size, 1), &strides_product))
      reject(source, "tensor '{}': shape {} has too many elements (overflow)", name, shape_str(shape));
  }
  return shape;
}

void parse_offsets(const Json& value, HeaderEntry& entry, uint64_t data_size, const std::string& source) {
  const std::string& name = entry.name;
  if (!value.is_array() || value.size() != 2)
    reject(source, "tensor '{}': data_offsets must be an array [begin, end], got {}", name, value.dump());
  if (!as_unsigned(value[0], entry.begin) || !as_unsigned(value[1], entry.end))
    reject(source, "tensor '{}': data_offsets {} must hold non-negative integers", name, value.dump());
  if (entry.begin > entry.end)
    reject(source, "tensor '{}': data_offsets [{}, {}] has begin > end", name, entry.begin, entry.end);
  if (entry.end > data_size)
    reject(source,
           "tensor '{}': data_offsets [{}, {}] are out of range: the data section holds {} "
           "bytes",
           name, entry.begin, entry.end, data_size);
  uint64_t expected = dtype_size(entry.dtype);
  for (int64_t size : entry.shape) {
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(size), &expected))
      reject(source, "tensor '{}': shape {} x {} bytes overflows", name, shape_str(entry.shape),
             dtype_size(entry.dtype));
  }
  if (expected != entry.end - entry.begin)
    reject(source,
           "tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {} "
           "bytes (size mismatch)",
           name, entry.begin, entry.end, entry.end - entry.begin, shape_str(entry.shape),
           safetensors_dtype_name(entry.dtype), expected);
}

ParsedHeader parse_header(std::string_view text, uint64_t data_size, const std::string& source) {
  std::vector<std::string> root_keys;
  const Json root = parse_header_json(text, source, root_keys);
  if (!root.is_object()) reject(source, "the header must be a JSON object, got {}", root.type_name());
  HEED_INTERNAL_ASSERT(root_keys.size() == root.size());
  ParsedHeader header;
  for (const std::string& name : root_keys) {
    const Json& value = root[name];
    if (name == kMetadataKey) {
      if (!value.is_object()) reject(source, "__metadata__ must be an object of strings, got {}", value.type_name());
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string())
          reject(source, "__metadata__ value of '{}' must be a string, got {} ({})", key, item.type_name(),
                 item.dump());
        header.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    if (!value.is_object())
      reject(source, "tensor '{}': entry must be an object with dtype, shape and data_offsets, got {}", name,
             value.type_name());
    for (const auto& [key, ignored] : value.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        reject(source, "tensor '{}': unexpected key '{}' (expected dtype, shape, data_offsets)", name, key);
    }
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!value.contains(key)) reject(source, "tensor '{}': missing '{}'", name, key);
    HeaderEntry entry;
    entry.name = name;
    entry.dtype = parse_dtype(value["dtype"], name, source);
    entry.shape = parse_shape(value["shape"], name, source);
    parse_offsets(value["data_offsets"], entry, data_size, source);
    header.entries.push_back(std::move(entry));
  }
  // Data order (header order among equal offsets), then no two non-empty ranges may share a byte.
  std::stable_sort(header.entries.begin(), header.entries.end(),
                   [](const HeaderEntry& a, const HeaderEntry& b) { return a.begin < b.begin; });
  const HeaderEntry* previous = nullptr;
  for (const HeaderEntry& entry : header.entries) {
    if (entry.begin == entry.end) continue;
    if (previous && entry.begin < previous->end)
      reject(source, "tensors '{}' [{}, {}] and '{}' [{}, {}] have overlapping data ranges", previous->name,
             previous->begin, previous->end, entry.name, entry.begin, entry.end);
    previous = &entry;
  }
  // The data_offsets must tile the data section exactly, as the format (and its reference
  // reader) demands: in data order the first non-empty tensor starts at 0, each one starts
  // where the previous one ends, the last one ends at the end of the data section, and an
  // empty tensor sits on such a boundary, never inside another tensor's bytes.
  uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
  previous = nullptr;
  for (const HeaderEntry& entry : header.entries) {
    if (entry.begin == entry.end) {
      if (previous && previous->begin < entry.begin && entry.begin < previous->end)
        reject(source, "empty tensor '{}' at data offset {} lies inside the bytes of tensor '{}' [{}, {}]", entry.name,
               entry.begin, previous->name, previous->begin, previous->end);
      continue;
    }
    if (entry.begin != covered) {
      if (previous)
        reject(source,
               "bytes [{}, {}) of the data section, between tensors '{}' and '{}', belong to no tensor (a hole: "
               "safetensors data_offsets must tile the data section)",
               covered, entry.begin, previous->name, entry.name);
      reject(source,
             "bytes [0, {}) of the data section, before tensor '{}', belong to no tensor (a hole: safetensors "
             "data_offsets must tile the data section)",
             entry.begin, entry.name);
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_size)
    reject(source,
           "the data section holds {} bytes but the tensors end at byte {}: {} trailing bytes belong to no tensor "
           "(safetensors data_offsets must tile the data section)",
           data_size, covered, data_size - covered);
  return header;
}

// Reads `n` bytes at data-section offset `offset` into `dst` (bounds already checked).
using ReadBytes = std::function<void(uint64_t offset, uint64_t n, void* dst)>;

SafetensorsFile decode_safetensors(uint64_t total_size, const ReadBytes& read, const std::string& source) {
  if (total_size < 8)
    reject(source, "the file is {} bytes, shorter than the 8-byte header length (truncated?)", total_size);
  uint8_t length_bytes[8];
  read(0, 8, length_bytes);
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  if (header_length > total_size - 8)
    reject(source, "header length {} is larger than the rest of the file ({} bytes; truncated?)", header_length,
           total_size - 8);
  if (header_length > kMaxSafetensorsHeaderBytes)
    reject(source, "header length {} exceeds the limit of {} bytes", header_length, kMaxSafetensorsHeaderBytes);
  if (header_length == 0) reject(source, "the header is empty (expected a JSON object)");
  std::string header_text(static_cast<size_t>(header_length), '\0');
  read(8, header_length, header_text.data());
  const uint64_t data_start = 8 + header_length, data_size = total_size - data_start;
  const ParsedHeader header = parse_header(header_text, data_size, source);

  SafetensorsFile file;
  file.metadata = header.metadata;
  file.tensors.reserve(header.entries.size());
  for (const HeaderEntry& entry : header.entries) {
    Tensor tensor = empty(entry.shape, TensorOptions(entry.dtype));
    const uint64_t bytes = entry.end - entry.begin;
    if (bytes > 0) {
      read(data_start + entry.begin, bytes, tensor.raw_data());
      if (entry.dtype == kBool) {  // any non-zero byte is true; keep bools valid (0/1)
        auto* p = static_cast<uint8_t*>(tensor.raw_data());
        for (uint64_t i = 0; i < bytes; ++i) p[i] = p[i] != 0;
      }
    }
    file.tensors.emplace_back(entry.name, std::move(tensor));
  }
  return file;
}

}  // namespace

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name_for_errors) {
  if (data == nullptr && size > 0) reject(name_for_errors, "null data pointer with {} bytes", size);
  return decode_safetensors(
      size,
      [&](uint64_t offset, uint64_t n, void* dst) {
        // decode_safetensors only asks for validated ranges; keep the check anyway.
        HEED_INTERNAL_ASSERT(offset <= size && n <= size - offset);
        if (n > 0) std::memcpy(dst, data + offset, static_cast<size_t>(n));
      },
      name_for_errors);
}

SafetensorsFile load_safetensors(const std::string& path) {
  auto [raw_fd, size] = open_regular_file(path, kLoadOp);
  FdCloser fd(raw_fd);
  return decode_safetensors(
      size, [&](uint64_t offset, uint64_t n, void* dst) { pread_exact(fd.get(), dst, n, offset, path, kLoadOp); },
      path);
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
}

Tensor SafetensorsFile::get(const std::string& name) const {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return tensor;
  std::vector<std::string> names;
  for (size_t i = 0; i < tensors.size() && i < 20; ++i) names.push_back(tensors[i].first);
  fail("SafetensorsFile::get", "no tensor named '{}' (the file has {} tensors: {}{})", name, tensors.size(),
       fmt::join(names, ", "), tensors.size() > 20 ? ", ..." : "");
}

}  // namespace heed::io
