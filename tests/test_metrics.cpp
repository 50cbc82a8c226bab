// tests/test_metrics.cpp — corpus BLEU against values computed by hand from n-gram counts.
#include <doctest/doctest.h>
#include <heed/heed.h>
#include <heed/metrics.h>

#include <cmath>

using heed::metrics::BleuSmoothing;
using heed::metrics::corpus_bleu;

TEST_CASE("BLEU of identical corpora is 100") {
  auto r = corpus_bleu({"the cat sat on the mat", "a b c d e"}, {"the cat sat on the mat", "a b c d e"});
  CHECK(r.score == doctest::Approx(100.0));
  CHECK(r.brevity_penalty == 1.0);
}

TEST_CASE("BLEU of one sentence, counted by hand") {
  // hyp: the cat sat on the mat / ref: the cat is on the mat
  // 1-grams: the(2) cat on mat match -> 5/6; 2-grams: "the cat", "on the", "the mat" -> 3/5;
  // 3-grams: "on the mat" -> 1/4; 4-grams: none of 3 -> exp smoothing 100 / (2 * 3).
  auto r = corpus_bleu({"the cat sat on the mat"}, {"the cat is on the mat"});
  CHECK(r.matches[0] == 5);
  CHECK(r.matches[1] == 3);
  CHECK(r.matches[2] == 1);
  CHECK(r.matches[3] == 0);
  CHECK(r.totals[3] == 3);
  const double expected = std::exp((std::log(500.0 / 6) + std::log(60.0) + std::log(25.0) + std::log(100.0 / 6)) / 4);
  CHECK(r.score == doctest::Approx(expected).epsilon(1e-12));
  CHECK(r.score == doctest::Approx(37.99).epsilon(1e-3));
  // Without smoothing a zero 4-gram precision gives 0.
  CHECK(corpus_bleu({"the cat sat on the mat"}, {"the cat is on the mat"}, BleuSmoothing::None).score < 1e-100);
}

TEST_CASE("BLEU clips repeated n-grams and applies the brevity penalty over the corpus") {
  // hyp "the the the the" vs ref "the cat": unigram matches clipped to 1 of 4.
  auto clipped = corpus_bleu({"the the the the"}, {"the cat"});
  CHECK(clipped.matches[0] == 1);
  // Corpus level: lengths add up before the brevity penalty (c = 3 + 4 = 7, r = 4 + 5 = 9).
  auto r = corpus_bleu({"a b c", "d e f g"}, {"a b c x", "d e f g h"});
  CHECK(r.hypothesis_length == 7);
  CHECK(r.reference_length == 9);
  CHECK(r.brevity_penalty == doctest::Approx(std::exp(1.0 - 9.0 / 7.0)).epsilon(1e-12));
  // every hypothesis n-gram matches: precisions 100, score = BP * 100
  CHECK(r.score == doctest::Approx(100.0 * std::exp(1.0 - 9.0 / 7.0)).epsilon(1e-12));
}

TEST_CASE("BLEU rejects mismatched corpora") { CHECK_THROWS_AS(corpus_bleu({"a"}, {}), heed::Error); }
