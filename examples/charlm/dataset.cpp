// examples/charlm/dataset.cpp — character data for the language model (see dataset.h).
#include "dataset.h"

#include <algorithm>
#include <random>

using namespace heed;

namespace charlm {

// A deterministic synthetic text: simple sentences from a small grammar, so the example
// needs no download.
std::string generated_corpus(uint64_t seed, size_t characters) {
  static const char* subjects[] = {"the old man", "a young woman", "the child",   "my brother",
                                   "the king",    "a small dog",   "the teacher", "our neighbour"};
  static const char* verbs[] = {"sees", "finds", "loves", "carries", "paints", "remembers", "forgets", "follows"};
  static const char* objects[] = {"the red ball", "a long letter", "the quiet river", "an apple",
                                  "the castle",   "a green door",  "the last song",   "the old book"};
  static const char* endings[] = {" today.", " again.", " in the morning.", " at night.", ".", " with care."};
  std::mt19937_64 rng(seed);
  std::string text;
  while (text.size() < characters) {
    std::string s =
        std::string(subjects[rng() % 8]) + " " + verbs[rng() % 8] + " " + objects[rng() % 8] + endings[rng() % 6];
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    text += s + ((rng() % 4 == 0) ? "\n" : " ");
  }
  return text;
}

Dataset load_dataset(const std::string& text) {
  Dataset d;
  std::vector<unsigned char> set(text.begin(), text.end());
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
  for (unsigned char c : set) {
    d.index[c] = static_cast<int64_t>(d.chars.size());
    d.chars.push_back(std::string(1, static_cast<char>(c)));
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(d.index[c]);
  const size_t n = ids.size() * 9 / 10;
  d.train.assign(ids.begin(), ids.begin() + static_cast<long>(n));
  d.val.assign(ids.begin() + static_cast<long>(n), ids.end());
  return d;
}

SavedModel read_saved_model(const nlohmann::json& config, const std::string& source, const char* op) {
  HEED_CHECK(config.is_object() && config.contains("chars"), op,
             "{} is not a charlm checkpoint (its configuration has no character table)", source);
  const io::JsonFields fields(config, op, source);
  SavedModel saved;
  // The bounds of charlm's flags (the vocabulary is at most the 256 byte values).
  nn::TransformerLMOptions& mo = saved.options;
  mo.vocab = fields.integer("vocab", 1, 256);
  mo.d_model = fields.integer("d_model", 1, 16384);
  mo.heads = fields.integer("heads", 1, 256);
  mo.layers = fields.integer("layers", 1, 64);
  mo.context = fields.integer("block", 2, 4096);
  mo.dropout = fields.number("dropout", 0.0, 0.99);
  mo.scale = nn::parse_attention_scale(fields.string("attn_scale"));
  HEED_CHECK(mo.d_model % mo.heads == 0, op, "{}: d_model {} is not divisible by heads {}", source, mo.d_model,
             mo.heads);
  const std::vector<double> bytes = fields.numbers("chars", 0, 255, mo.vocab);
  for (double byte : bytes) {
    const auto c = static_cast<unsigned char>(byte);
    HEED_CHECK(static_cast<double>(c) == byte && !saved.vocabulary.index.count(c), op,
               "{}: the character table holds {} twice or as a non-integer", source, byte);
    saved.vocabulary.index[c] = static_cast<int64_t>(saved.vocabulary.chars.size());
    saved.vocabulary.chars.push_back(std::string(1, static_cast<char>(c)));
  }
  saved.data = fields.string("data");
  saved.seed = fields.unsigned_integer("seed", uint64_t{1} << 62);
  return saved;
}

// Random windows: x (B,T) and the next characters y (B,T), drawn with the default generator.
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t block) {
  HEED_CHECK(static_cast<int64_t>(data.size()) > block + 1, "charlm",
             "the data ({} characters) is shorter than a block", data.size());
  const std::vector<int64_t> starts =
      randint(0, static_cast<int64_t>(data.size()) - block, {batch}).to_vector<int64_t>();
  std::vector<int64_t> x(static_cast<size_t>(batch * block)), y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < block; ++t) {
      x[static_cast<size_t>(b * block + t)] = data[static_cast<size_t>(starts[b] + t)];
      y[static_cast<size_t>(b * block + t)] = data[static_cast<size_t>(starts[b] + t + 1)];
    }
  return {from_vector(x, {batch, block}), from_vector(y, {batch, block})};
}

}  // namespace charlm
