// tests/test_translate_corpus.cpp — the synthetic German -> English corpora of
// examples/translate (corpus.h): both levels deterministic by seed with disjoint splits and
// clean tokens; the hard level long, varied and grammatical where a rule can be checked
// mechanically (cases after prepositions, contractions, "dass" after a comma, English without
// German function words), with a long tail of rare words; the positions a model needs.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "corpus.h"
#include "task.h"

using translate::Corpus;
using translate::CorpusOptions;
using translate::Pair;
using translate::split_tokens;
using translate::TaskLevel;

namespace {

Corpus make(TaskLevel level, uint64_t seed, int train) {
  CorpusOptions o;
  o.level = level;
  o.seed = seed;
  o.train_size = train;
  o.validation_size = 200;
  o.test_size = 300;
  return translate::generate_corpus(o);
}

std::vector<Pair> all_pairs(const Corpus& c) {
  std::vector<Pair> out = c.train;
  out.insert(out.end(), c.validation.begin(), c.validation.end());
  out.insert(out.end(), c.test.begin(), c.test.end());
  return out;
}

bool same(const std::vector<Pair>& a, const std::vector<Pair>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].source != b[i].source || a[i].target != b[i].target) return false;
  return true;
}

}  // namespace

TEST_CASE("translate corpus: both levels are deterministic by seed, with disjoint splits and clean tokens") {
  for (TaskLevel level : {TaskLevel::Quick, TaskLevel::Hard}) {
    CAPTURE(translate::task_level_name(level));
    const Corpus a = make(level, 7, 3000), b = make(level, 7, 3000), c = make(level, 8, 3000);
    CHECK(same(all_pairs(a), all_pairs(b)));
    CHECK(!same(all_pairs(a), all_pairs(c)));
    CHECK(a.train.size() == 3000);
    CHECK(a.validation.size() == 200);
    CHECK(a.test.size() == 300);
    std::unordered_set<std::string> train_sources;
    for (const Pair& p : a.train) train_sources.insert(p.source);
    for (const std::vector<Pair>* held_out : {&a.validation, &a.test})
      for (const Pair& p : *held_out) CHECK(!train_sources.count(p.source));
    for (const Pair& p : all_pairs(a))
      for (const std::string* side : {&p.source, &p.target}) {
        CAPTURE(*side);
        REQUIRE(!side->empty());
        CHECK(side->front() != ' ');
        CHECK(side->back() != ' ');
        CHECK(side->find("  ") == std::string::npos);
        CHECK(std::none_of(side->begin(), side->end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; }));
      }
  }
  // A smaller training set leaves the held-out sets unchanged.
  const Corpus big = make(TaskLevel::Hard, 3, 3000), small = make(TaskLevel::Hard, 3, 500);
  CHECK(same(big.test, small.test));
  CHECK(same(big.validation, small.validation));
  CHECK(translate::parse_task_level("hard") == TaskLevel::Hard);
  CHECK(translate::parse_task_level("quick") == TaskLevel::Quick);
  CHECK_THROWS_AS(translate::parse_task_level("Hard"), heed::Error);
}

TEST_CASE("translate corpus: the hard level is long, varied and grammatical where a rule is checkable") {
  const Corpus hard = make(TaskLevel::Hard, 1, 20000), quick = make(TaskLevel::Quick, 1, 20000);
  auto mean_length = [](const Corpus& c) {
    double tokens = 0;
    for (const Pair& p : c.train) tokens += static_cast<double>(split_tokens(p.source).size());
    return tokens / static_cast<double>(c.train.size());
  };
  auto types = [](const Corpus& c) {
    std::set<std::string> de;
    for (const Pair& p : c.train)
      for (const std::string& t : split_tokens(p.source)) de.insert(t);
    return de.size();
  };
  CHECK(mean_length(hard) > 1.5 * mean_length(quick));
  CHECK(types(hard) > 2500);  // 3,628 on the default 40,000 pairs
  CHECK(types(hard) > 5 * types(quick));
  // A long tail (the Zipf-distributed compounds): many German words occur only once or twice.
  std::map<std::string, int> counts;
  for (const Pair& p : hard.train)
    for (const std::string& t : split_tokens(p.source)) ++counts[t];
  const auto rare = std::count_if(counts.begin(), counts.end(), [](const auto& c) { return c.second <= 2; });
  CHECK(rare > 500);
  // Compounds are one German word ("haustür", two English words "house door"): several end in tür.
  const std::string door = "tür";  // 4 bytes in UTF-8
  size_t door_compounds = 0;
  for (const auto& [word, count] : counts)
    if (word.size() > door.size() && word.compare(word.size() - door.size(), door.size(), door) == 0) ++door_compounds;
  CHECK(door_compounds >= 2);
  const translate::HardLexiconSizes lexicon = translate::hard_lexicon_sizes();
  CHECK(lexicon.nouns >= 280);
  CHECK(lexicon.verbs >= 100);
  CHECK(lexicon.adjectives >= 80);
  CHECK(lexicon.compounds > 4000);

  const std::set<std::string> dative_starts = {"dem", "der", "den", "einem", "einer"};
  const std::set<std::string> accusative_starts = {"den", "die", "das", "einen", "eine", "ein"};
  const std::set<std::string> german_only = {"der", "die", "das", "dem", "den", "und", "nicht", "ist", "ein"};
  size_t longest = 0, relative = 0, prepositions = 0, contractions = 0, subordinate = 0;
  for (const Pair& p : all_pairs(hard)) {
    CAPTURE(p.source);
    CAPTURE(p.target);
    const std::vector<std::string> de = split_tokens(p.source), en = split_tokens(p.target);
    longest = std::max({longest, de.size(), en.size()});
    for (size_t i = 0; i + 1 < de.size(); ++i) {
      const std::string& w = de[i];
      const std::string& next = de[i + 1];
      // Prepositions with the dative take a dative article, and "in/an/von dem" contract. (mit,
      // auf, an and vor are also separable prefixes, which end a clause: before "," or "und".)
      const bool clause_ends = next == "," || next == "und";
      if (!clause_ends && (w == "mit" || w == "unter" || w == "neben" || w == "hinter" || w == "auf" || w == "vor")) {
        ++prepositions;
        CHECK(dative_starts.count(next));
      }
      if (!clause_ends && (w == "in" || w == "an" || w == "von")) {
        ++prepositions;
        CHECK(next != "dem");
        CHECK((next == "der" || next == "den" || next == "einem" || next == "einer"));
      }
      if (w == "im" || w == "am" || w == "vom") ++contractions;
      if (w == "für" || w == "ohne") CHECK(accusative_starts.count(next));
      // "dass" opens a clause after a comma.
      if (next == "dass") CHECK(w == ",");
      if (w == "dass" || w == "weil" || w == "obwohl") ++subordinate;
      if (w == "," && (next == "der" || next == "die" || next == "das" || next == "den")) ++relative;
    }
    for (const std::string& t : en) CHECK(!german_only.count(t));
  }
  CHECK(longest <= 40);
  CHECK(longest >= 28);
  const double n = static_cast<double>(hard.train.size());
  CHECK(static_cast<double>(relative) > 0.05 * n);
  CHECK(static_cast<double>(prepositions) > 0.1 * n);
  CHECK(contractions > 0);
  CHECK(static_cast<double>(subordinate) > 0.1 * n);
}

TEST_CASE("translate: positions_needed covers the longest sentence of every split") {
  CorpusOptions o;
  o.level = TaskLevel::Hard;
  o.train_size = 2000;
  o.validation_size = 50;
  o.test_size = 50;
  const translate::Task task = translate::make_task(o);
  size_t longest = 0;
  for (const std::vector<Pair>* split : {&task.corpus.train, &task.corpus.validation, &task.corpus.test})
    for (const Pair& p : *split)
      longest = std::max({longest, split_tokens(p.source).size(), split_tokens(p.target).size()});
  const int64_t positions = translate::positions_needed(task);
  CHECK(positions >= static_cast<int64_t>(longest) + 2);  // + <bos> / <eos>
  CHECK(positions % 16 == 0);
  CHECK(positions < static_cast<int64_t>(longest) + 2 + 16);
  o.level = TaskLevel::Quick;
  CHECK(translate::positions_needed(translate::make_task(o)) == 32);
}
