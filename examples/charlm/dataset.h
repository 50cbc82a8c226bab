// examples/charlm/dataset.h — character data for the language model: the generated corpus
// used without --data, the character vocabulary, the 90% / 10% split, random windows, and
// the model and vocabulary a checkpoint's configuration records.
//
// Invariants: the vocabulary is the sorted set of bytes of the text (as the PyTorch
// reference builds it); batches are drawn with heed's default generator, so a restored RNG
// state replays them exactly.
#pragma once

#include <heed/heed.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace charlm {

// A deterministic synthetic English-like text of about `characters` bytes.
std::string generated_corpus(uint64_t seed, size_t characters);

struct Dataset {
  std::vector<std::string> chars;  // id -> byte
  std::map<unsigned char, int64_t> index;
  std::vector<int64_t> train, val;  // first 90% / last 10%
};
Dataset load_dataset(const std::string& text);

// What a charlm checkpoint's configuration holds about its model: the TransformerLM options
// (read within the bounds of charlm's flags) and the character table (id -> byte; `index` set,
// no train / val ids), so that a checkpoint can be sampled or checked without its training
// text. heed::Error naming `source` (and `op`) when the configuration is not a charlm one or is
// out of bounds.
struct SavedModel {
  heed::nn::TransformerLMOptions options;
  Dataset vocabulary;
  std::string data;  // "generated" or the --data path it was trained on
  uint64_t seed = 0;
};
SavedModel read_saved_model(const nlohmann::json& config, const std::string& source, const char* op);

// Random windows: x (B,T) and the next characters y (B,T).
std::pair<heed::Tensor, heed::Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t block);

}  // namespace charlm
