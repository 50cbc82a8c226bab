// layers/src/checkpoint.cpp — model files and training checkpoints (see heed/checkpoint.h).
//
// Invariant: every file goes through io::write_file_atomic (never half-written at its path;
// temporaries of killed writers are removed by the next save). Test-only hook: when the
// environment variable HEED_TEST_KILL_DURING_CHECKPOINT_WRITE is set to a step number,
// save_checkpoint for that step writes half of the file into the temporary and then raises
// SIGKILL on its own process, so that tests/test_crash_safety.cpp can kill a writer in the
// middle of a checkpoint write deterministically. Nothing else reads it; never set it outside
// tests.
#include "heed/checkpoint.h"

#include <signal.h>

#include <cstdlib>

#include "heed/io.h"
#include "heed/json_read.h"
#include "heed/random.h"

namespace heed::io {

namespace {

constexpr const char* kModelFormat = "heed-model-v1";
constexpr const char* kCheckpointFormat = "heed-checkpoint-v1";

nlohmann::json parse_metadata_json(const SafetensorsFile& file, const std::string& key, const std::string& path) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) return nullptr;
  try {
    return parse_json(it->second, path);  // depth-limited: a hostile value cannot blow the stack
  } catch (const std::exception& e) {
    fail("load_checkpoint", "{}: metadata '{}' is not valid JSON ({})", path, key, e.what());
  }
}

std::string format_of(const SafetensorsFile& file) {
  auto it = file.metadata.find("format");
  return it == file.metadata.end() ? std::string() : it->second;
}

void expect_format(const SafetensorsFile& file, const std::string& path, const char* expected, const char* op) {
  const std::string format = format_of(file);
  HEED_CHECK(format == expected, op, "{}: expected a {} file, but its format is '{}'{}", path, expected,
             format.empty() ? "(none)" : format,
             format == kCheckpointFormat ? " (a training checkpoint: use load_checkpoint)"
             : format == kModelFormat    ? " (a model file: use load_model)"
                                         : "");
}

// The step HEED_TEST_KILL_DURING_CHECKPOINT_WRITE names, or -1 (unset or not a number).
int64_t test_kill_step() {
  const char* value = std::getenv("HEED_TEST_KILL_DURING_CHECKPOINT_WRITE");
  if (!value || !*value) return -1;
  char* end = nullptr;
  const long long step = std::strtoll(value, &end, 10);
  return *end == '\0' && step >= 0 ? static_cast<int64_t>(step) : -1;
}

}  // namespace

void save_model(const nn::Module& model, const std::string& path, const nlohmann::json& config) {
  save_safetensors(path, model.state_dict(), {{"format", kModelFormat}, {"config", config.dump()}});
}

nlohmann::json load_model(nn::Module& model, const std::string& path, bool strict) {
  const SafetensorsFile file = load_safetensors(path);
  expect_format(file, path, kModelFormat, "load_model");
  model.load_state_dict(file.tensors, strict);
  return parse_metadata_json(file, "config", path);
}

nlohmann::json read_config(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const std::string format = format_of(file);
  HEED_CHECK(format == kModelFormat || format == kCheckpointFormat, "read_config",
             "{}: not a heed model or checkpoint (format '{}')", path, format);
  return parse_metadata_json(file, "config", path);
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                     const optim::LRScheduler* scheduler, int64_t step, const nlohmann::json& config,
                     const nlohmann::json& extra) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back("model." + name, t);
  nlohmann::json optimizer_scalars = nullptr;
  if (optimizer) {
    optim::OptimizerState state = optimizer->state_dict();
    for (auto& [name, t] : state.tensors) tensors.emplace_back("optimizer." + name, t);
    optimizer_scalars = state.scalars;
  }
  const Generator::Draw gen = default_generator().state();
  const nlohmann::json rng = {{"seed", gen.seed}, {"offset", gen.first}};
  const std::map<std::string, std::string> metadata = {
      {"format", kCheckpointFormat},
      {"step", std::to_string(step)},
      {"config", config.dump()},
      {"optimizer", optimizer_scalars.dump()},
      {"scheduler", scheduler ? scheduler->state_dict().dump() : "null"},
      {"rng", rng.dump()},
      {"extra", extra.dump()}};
  if (step == test_kill_step()) {
    // Test-only (see the file comment): half the bytes into the temporary, then die.
    write_file_atomic(path, [&](std::ostream& out) {
      const std::string bytes = serialize_safetensors(tensors, metadata);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
      out.flush();
      ::raise(SIGKILL);
    });
  }
  save_safetensors(path, tensors, metadata);
}

namespace {

RestoredCheckpoint restore_checkpoint(const SafetensorsFile& file, const std::string& path, nn::Module& model,
                                      optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
  const char* op = "load_checkpoint";
  expect_format(file, path, kCheckpointFormat, op);
  RestoredCheckpoint out;
  {
    auto it = file.metadata.find("step");
    HEED_CHECK(it != file.metadata.end(), op, "{}: the checkpoint has no step", path);
    try {
      size_t used = 0;
      out.step = std::stoll(it->second, &used);
      HEED_CHECK(used == it->second.size() && out.step >= 0, op, "{}: bad step '{}'", path, it->second);
    } catch (const std::logic_error&) {
      fail(op, "{}: bad step '{}'", path, it->second);
    }
  }
  nn::NamedTensors model_tensors;
  std::vector<std::pair<std::string, Tensor>> optimizer_tensors;
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind("model.", 0) == 0)
      model_tensors.emplace_back(name.substr(6), t);
    else if (name.rfind("optimizer.", 0) == 0)
      optimizer_tensors.emplace_back(name.substr(10), t);
    else
      fail(op, "{}: unexpected tensor '{}' (neither model. nor optimizer.)", path, name);
  }
  const nlohmann::json optimizer_scalars = parse_metadata_json(file, "optimizer", path);
  const nlohmann::json scheduler_state = parse_metadata_json(file, "scheduler", path);
  const nlohmann::json rng = parse_metadata_json(file, "rng", path);
  HEED_CHECK(rng.is_object(), op, "{}: missing or malformed RNG state", path);
  const io::JsonFields rng_fields(rng, op, path + " (rng)", "rng");
  const uint64_t rng_seed = rng_fields.unsigned_integer("seed");
  const uint64_t rng_offset = rng_fields.unsigned_integer("offset");
  if (optimizer) {
    HEED_CHECK(!optimizer_scalars.is_null(), op, "{}: the checkpoint has no optimizer state", path);
    optimizer->load_state_dict({optimizer_tensors, optimizer_scalars});
  }
  if (scheduler) {
    HEED_CHECK(!scheduler_state.is_null(), op, "{}: the checkpoint has no scheduler state", path);
    scheduler->load_state_dict(scheduler_state);
  }
  model.load_state_dict(model_tensors, true);
  default_generator().set_state(rng_seed, rng_offset);
  out.config = parse_metadata_json(file, "config", path);
  out.extra = parse_metadata_json(file, "extra", path);
  return out;
}

}  // namespace

RestoredCheckpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                                   optim::LRScheduler* scheduler) {
  return restore_checkpoint(load_safetensors(path), path, model, optimizer, scheduler);
}

RestoredCheckpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& name_for_errors,
                                    nn::Module& model, optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
  return restore_checkpoint(parse_safetensors(data, size, name_for_errors), name_for_errors, model, optimizer,
                            scheduler);
}

}  // namespace heed::io
