// examples/charlm/dataset.h — character data for the language model: the generated corpus
// used without --data, the character vocabulary, the 90% / 10% split and random windows.
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

// Random windows: x (B,T) and the next characters y (B,T).
std::pair<heed::Tensor, heed::Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t block);

}  // namespace charlm
