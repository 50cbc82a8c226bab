// heed/io.h — checkpoint files: safetensors tensors, JSON, and atomic file replacement.
//
// Invariants:
//  * save_* never leaves a half-written file at `path`: data goes to `path.tmp.<pid>`, is
//    flushed and fsync'ed, then renamed over `path` (and the directory fsync'ed). On any
//    failure the temporary is removed and the previous file at `path` is untouched. A writer
//    killed before its rename leaves its temporary behind; the next write of `path` removes
//    every `path.tmp.<pid>` whose process no longer exists.
//  * save_safetensors writes the exact safetensors layout: u64 little-endian header length
//    N, N bytes of JSON (padded with spaces to a multiple of 8), then the tensors' raw
//    little-endian bytes back to back in the order given. Keys appear in that order, after
//    an optional "__metadata__" object of string values; each entry lists dtype, shape and
//    data_offsets (relative to the start of the data section).
//  * load_safetensors/parse_safetensors treat the input as hostile: every length, offset and
//    shape is checked (with overflow checks) before any byte is read, so a malformed file is
//    a heed::Error("heed::load_safetensors: <path>: <problem>"), never a crash or an
//    out-of-bounds read. Tensors come back on the CPU, in data order, contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "heed/tensor.h"

namespace heed::io {

// The largest safetensors header accepted (the reference implementation uses the same cap).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// ---- atomic writes --------------------------------------------------------------------------

// Runs `writer` on a stream backed by `path.tmp.<pid>`, then flushes, fsyncs and renames the
// temporary over `path`. If `writer` throws, its exception propagates unchanged after the
// temporary is removed; I/O failures raise heed::Error("heed::write_file_atomic: <path>: ...").
// One writer per path at a time: concurrent writers of one path in one process share the
// temporary's name. Before writing, removes `path.tmp.<pid>` files left by writers whose
// process is gone (checked with kill(pid, 0) on this machine; with one writer per path, a
// temporary of another machine's process is never a live write).
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer);
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole file as bytes; heed::Error naming the path and the reason when it cannot be read.
std::string read_file(const std::string& path);

// ---- JSON -----------------------------------------------------------------------------------

// Pretty-printed (2-space indent), written atomically.
void save_json(const std::string& path, const nlohmann::json& value);
// Errors name the path and, for malformed JSON, the byte position of the problem.
nlohmann::json load_json(const std::string& path);
// What load_json does after reading the file: parses `text` (any bytes) and raises
// heed::Error("heed::load_json: <name_for_errors>: invalid JSON at byte N: ...") on malformed
// input, nesting deeper than kMaxJsonDepth included (a deep document must not exhaust the stack).
inline constexpr int kMaxJsonDepth = 512;
nlohmann::json parse_json(std::string_view text, const std::string& name_for_errors);

// ---- safetensors ----------------------------------------------------------------------------

// Safetensors dtype names: "F32", "F64", "F16", "BF16", "I32", "I64", "BOOL".
std::string_view safetensors_dtype_name(DType dtype);

// Writes the tensors (copied to the CPU and made contiguous as needed; autograd history is
// ignored) and string metadata. Names must be unique and must not be "__metadata__".
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The exact bytes save_safetensors writes (for in-memory use and tests).
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU, contiguous, in data order
  std::map<std::string, std::string> metadata;
  // The tensor called `name`; heed::Error listing the available names when there is none.
  Tensor get(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Reads and validates a safetensors file (see the invariants above). Reads the header first
// and then each tensor's bytes straight into its storage (no whole-file copy).
SafetensorsFile load_safetensors(const std::string& path);

// Validates and decodes safetensors bytes held in memory; errors read
// "heed::load_safetensors: <name_for_errors>: <problem>". Safe for any (data, size).
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name_for_errors);

}  // namespace heed::io
