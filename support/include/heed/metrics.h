// heed/metrics.h — evaluation metrics.
//
// corpus_bleu follows sacreBLEU's corpus_bleu exactly (n-gram order 4, one reference per
// hypothesis, brevity penalty exp(1 - r/c) when c < r, and by default its 'exp' smoothing:
// the k-th zero n-gram precision becomes 100 / (2^k * total_n)); the text is already
// tokenized (sacreBLEU's tokenize='none'): tokens are separated by spaces.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace heed::metrics {

struct BleuResult {
  double score = 0.0;                  // 0..100
  std::array<double, 4> precisions{};  // n-gram precisions in percent, after smoothing
  std::array<long long, 4> matches{};  // clipped n-gram matches
  std::array<long long, 4> totals{};   // hypothesis n-grams
  double brevity_penalty = 1.0;
  long long hypothesis_length = 0;
  long long reference_length = 0;
};

enum class BleuSmoothing { None, Exp };

BleuResult corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                       BleuSmoothing smoothing = BleuSmoothing::Exp);

}  // namespace heed::metrics
