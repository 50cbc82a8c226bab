// heed/checkpoint.h — saving and restoring models and whole training runs.
//
// A model file is a safetensors file whose tensor names are the state_dict keys (readable by
// Python's safetensors), with metadata {"format": "heed-model-v1", "config": <json>}.
// A training checkpoint is one safetensors file holding "model.<key>" and
// "optimizer.<key>" tensors, with metadata {"format": "heed-checkpoint-v1", "step",
// "config", "optimizer", "scheduler", "rng", "extra"} (JSON strings): one file, written
// atomically (temporary file, fsync, rename), so a crash during a save leaves the previous
// checkpoint intact. Restoring model, optimizer, scheduler and the RNG makes the continued
// run bit-identical to an uninterrupted one on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "heed/lr_scheduler.h"
#include "heed/nn/module.h"
#include "heed/optim.h"

namespace heed::io {

void save_model(const nn::Module& model, const std::string& path, const nlohmann::json& config = nullptr);
// Loads weights saved by save_model into `model` and returns the stored config.
nlohmann::json load_model(nn::Module& model, const std::string& path, bool strict = true);
// The config stored in a model file or training checkpoint, without loading any weights.
nlohmann::json read_config(const std::string& path);

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                     const optim::LRScheduler* scheduler, int64_t step, const nlohmann::json& config,
                     const nlohmann::json& extra = nullptr);

struct RestoredCheckpoint {
  int64_t step = 0;
  nlohmann::json config;
  nlohmann::json extra;
};
// Restores everything save_checkpoint stored (the RNG state included). The optimizer and
// scheduler may be null to restore only the model.
RestoredCheckpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer = nullptr,
                                   optim::LRScheduler* scheduler = nullptr);
// What load_checkpoint does after reading the file: restores from checkpoint bytes held in
// memory (any bytes: malformed input is a heed::Error naming `name_for_errors`, never a crash).
RestoredCheckpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& name_for_errors,
                                    nn::Module& model, optim::Optimizer* optimizer = nullptr,
                                    optim::LRScheduler* scheduler = nullptr);

}  // namespace heed::io
