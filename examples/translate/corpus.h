// examples/translate/corpus.h — a synthetic German -> English parallel corpus, generated in
// code and deterministic by seed.
//
// Two kinds of pairs:
//  * number phrases 1..9999: German writes units before tens and compounds everything
//    ("fünfundvierzig" -> "forty five"); the German side is tokenized into its morphemes
//    ("fünf und vierzig"), so unseen numbers can be translated compositionally;
//  * sentences from a small bilingual lexicon with real word-order changes: verb-second
//    after a fronted adverb, verb-final subordinate clauses, separable verbs whose prefix
//    goes to the end, modal + infinitive, perfect tense (participle last), negation with
//    English do-support, counted plural objects.
// Invariants: the same seed gives the same corpus; train, validation and test share no
// source sentence; every token is lower-case; tokens are separated by single spaces.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace translate {

struct Pair {
  std::string source;  // German, tokenized
  std::string target;  // English, tokenized
};

struct Corpus {
  std::vector<Pair> train, validation, test;
};

// The corpus level: `quick` (the demo: short clauses, a small lexicon) or `hard` (long sentences
// of several clauses with relative and subordinate clauses and a lexicon of about 2,000 German
// surface forms; corpus_hard.cpp).
enum class TaskLevel { Quick, Hard };
// "quick" / "hard" (the --task flag and the checkpoint's "task" key); parse throws heed::Error.
const char* task_level_name(TaskLevel level);
TaskLevel parse_task_level(const std::string& name);

struct CorpusOptions {
  TaskLevel level = TaskLevel::Quick;
  uint64_t seed = 1;
  int train_size = 40000;
  int validation_size = 500;
  int test_size = 1000;
  double number_fraction = 0.25;  // share of pairs that are bare number phrases
};

Corpus generate_corpus(const CorpusOptions& options);

// One random pair (exposed for tests).
Pair random_pair(std::mt19937_64& rng, double number_fraction);
// One random pair of the hard level.
Pair random_hard_pair(std::mt19937_64& rng);
// The hard level's lexicon: entries of each kind (compounds: the fixed list noun phrases draw from).
struct HardLexiconSizes {
  size_t nouns = 0, adjectives = 0, verbs = 0, names = 0, compounds = 0;
};
HardLexiconSizes hard_lexicon_sizes();

// German and English words of a number 1..9999.
std::string german_number(int n);
std::string english_number(int n);

// Splits user text into corpus tokens: lower-cases, separates commas, and segments German
// number compounds into morphemes ("dreihundertfünfundvierzig" -> "drei hundert fünf und
// vierzig").
std::vector<std::string> tokenize_german(const std::string& text);
// Joins German tokens for display, re-forming number compounds.
std::string detokenize_german(const std::vector<std::string>& tokens);

std::vector<std::string> split_tokens(const std::string& text);

}  // namespace translate
