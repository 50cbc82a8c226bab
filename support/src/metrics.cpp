// support/src/metrics.cpp — corpus BLEU (sacreBLEU's definition, see metrics.h).
#include "heed/metrics.h"

#include <cmath>
#include <map>
#include <sstream>

#include "heed/error.h"

namespace heed::metrics {

namespace {
std::vector<std::string> tokens_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string t;
  while (in >> t) out.push_back(t);
  return out;
}

std::map<std::vector<std::string>, long long> ngram_counts(const std::vector<std::string>& tokens, size_t n) {
  std::map<std::vector<std::string>, long long> counts;
  for (size_t i = 0; i + n <= tokens.size(); ++i)
    ++counts[std::vector<std::string>(tokens.begin() + i, tokens.begin() + i + n)];
  return counts;
}
}  // namespace

BleuResult corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                       BleuSmoothing smoothing) {
  HEED_CHECK(hypotheses.size() == references.size(), "corpus_bleu", "got {} hypotheses but {} references",
             hypotheses.size(), references.size());
  BleuResult r;
  for (size_t s = 0; s < hypotheses.size(); ++s) {
    const std::vector<std::string> hyp = tokens_of(hypotheses[s]), ref = tokens_of(references[s]);
    r.hypothesis_length += static_cast<long long>(hyp.size());
    r.reference_length += static_cast<long long>(ref.size());
    for (size_t n = 1; n <= 4; ++n) {
      const auto h = ngram_counts(hyp, n), g = ngram_counts(ref, n);
      for (const auto& [gram, count] : h) {
        auto it = g.find(gram);
        if (it != g.end()) r.matches[n - 1] += std::min(count, it->second);
      }
      r.totals[n - 1] += hyp.size() >= n ? static_cast<long long>(hyp.size() - n + 1) : 0;
    }
  }
  double smooth = 1.0;
  double log_sum = 0.0;
  for (size_t n = 0; n < 4; ++n) {
    if (r.totals[n] == 0) {
      // sacreBLEU stops here: higher orders keep precision 0 (score 0).
      for (size_t m = n; m < 4; ++m) r.precisions[m] = 0.0;
      break;
    }
    if (r.matches[n] == 0) {
      if (smoothing == BleuSmoothing::Exp) {
        smooth *= 2.0;
        r.precisions[n] = 100.0 / (smooth * static_cast<double>(r.totals[n]));
      } else {
        r.precisions[n] = 0.0;
      }
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(r.matches[n]) / static_cast<double>(r.totals[n]);
    }
  }
  for (double p : r.precisions) log_sum += p > 0.0 ? std::log(p) : -9999999999.0;
  if (r.hypothesis_length < r.reference_length) {
    r.brevity_penalty =
        r.hypothesis_length > 0
            ? std::exp(1.0 - static_cast<double>(r.reference_length) / static_cast<double>(r.hypothesis_length))
            : 0.0;
  }
  r.score = r.brevity_penalty * std::exp(log_sum / 4.0);
  return r;
}

}  // namespace heed::metrics
