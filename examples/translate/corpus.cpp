// examples/translate/corpus.cpp — the synthetic German -> English corpus (see corpus.h).
#include "corpus.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include <heed/error.h>

namespace translate {

namespace {

// ---- numbers --------------------------------------------------------------------------------

const char* const kGermanUnits[] = {"", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"};
const char* const kGermanTeens[] = {"zehn",     "elf",      "zwölf",    "dreizehn", "vierzehn",
                                    "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"};
const char* const kGermanTens[] = {"",        "",        "zwanzig", "dreißig", "vierzig",
                                   "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"};
const char* const kEnglishSmall[] = {"",         "one",     "two",     "three",     "four",     "five",    "six",
                                     "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                                     "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* const kEnglishTens[] = {"",      "",      "twenty",  "thirty", "forty",
                                    "fifty", "sixty", "seventy", "eighty", "ninety"};

// "ein" inside compounds, "eins" when it ends the number.
std::string german_unit_prefix(int u) { return u == 1 ? "ein" : kGermanUnits[u]; }

// ---- lexicon --------------------------------------------------------------------------------

enum Tag : unsigned { kAnimate = 1, kThing = 2, kRead = 4, kEat = 8, kOpen = 16 };

struct Noun {
  char gender;  // 'm', 'f', 'n'
  const char* de;
  const char* de_plural;
  const char* en;
  const char* en_plural;
  unsigned tags;
};

const Noun kNouns[] = {
    {'m', "mann", "männer", "man", "men", kAnimate},
    {'f', "frau", "frauen", "woman", "women", kAnimate},
    {'n', "kind", "kinder", "child", "children", kAnimate},
    {'m', "hund", "hunde", "dog", "dogs", kAnimate},
    {'f', "katze", "katzen", "cat", "cats", kAnimate},
    {'m', "lehrer", "lehrer", "teacher", "teachers", kAnimate},
    {'m', "vater", "väter", "father", "fathers", kAnimate},
    {'n', "mädchen", "mädchen", "girl", "girls", kAnimate},
    {'f', "ärztin", "ärztinnen", "doctor", "doctors", kAnimate},
    {'m', "bruder", "brüder", "brother", "brothers", kAnimate},
    {'f', "schwester", "schwestern", "sister", "sisters", kAnimate},
    {'m', "apfel", "äpfel", "apple", "apples", kThing | kEat},
    {'m', "kuchen", "kuchen", "cake", "cakes", kThing | kEat},
    {'f', "banane", "bananen", "banana", "bananas", kThing | kEat},
    {'n', "buch", "bücher", "book", "books", kThing | kRead | kOpen},
    {'f', "zeitung", "zeitungen", "newspaper", "newspapers", kThing | kRead},
    {'m', "brief", "briefe", "letter", "letters", kThing | kRead | kOpen},
    {'m', "ball", "bälle", "ball", "balls", kThing},
    {'n', "auto", "autos", "car", "cars", kThing},
    {'f', "blume", "blumen", "flower", "flowers", kThing},
    {'n', "fenster", "fenster", "window", "windows", kThing | kOpen},
    {'f', "tür", "türen", "door", "doors", kThing | kOpen},
    {'f', "tasche", "taschen", "bag", "bags", kThing | kOpen},
    {'f', "flasche", "flaschen", "bottle", "bottles", kThing | kOpen},
    {'n', "haus", "häuser", "house", "houses", kThing},
};

struct Verb {
  const char* de_1sg;
  const char* de_2sg;
  const char* de_3sg;
  const char* de_1pl;
  const char* infinitive;  // with the separable prefix attached
  const char* participle;
  const char* prefix;  // separable prefix, or "" (it goes to the end of a main clause)
  const char* en_base;
  const char* en_3sg;
  const char* en_past;
  unsigned objects;
};

const Verb kVerbs[] = {
    {"sehe", "siehst", "sieht", "sehen", "sehen", "gesehen", "", "see", "sees", "saw", kAnimate | kThing},
    {"kaufe", "kaufst", "kauft", "kaufen", "kaufen", "gekauft", "", "buy", "buys", "bought", kThing},
    {"lese", "liest", "liest", "lesen", "lesen", "gelesen", "", "read", "reads", "read", kRead},
    {"finde", "findest", "findet", "finden", "finden", "gefunden", "", "find", "finds", "found", kAnimate | kThing},
    {"brauche", "brauchst", "braucht", "brauchen", "brauchen", "gebraucht", "", "need", "needs", "needed", kThing},
    {"esse", "isst", "isst", "essen", "essen", "gegessen", "", "eat", "eats", "ate", kEat},
    {"suche", "suchst", "sucht", "suchen", "suchen", "gesucht", "", "look for", "looks for", "looked for",
     kAnimate | kThing},
    {"male", "malst", "malt", "malen", "malen", "gemalt", "", "paint", "paints", "painted", kAnimate | kThing},
    {"trage", "trägst", "trägt", "tragen", "tragen", "getragen", "", "carry", "carries", "carried", kThing},
    {"mache", "machst", "macht", "machen", "aufmachen", "aufgemacht", "auf", "open", "opens", "opened", kOpen},
    {"mache", "machst", "macht", "machen", "zumachen", "zugemacht", "zu", "close", "closes", "closed", kOpen},
    {"rufe", "rufst", "ruft", "rufen", "anrufen", "angerufen", "an", "call", "calls", "called", kAnimate},
    {"hole", "holst", "holt", "holen", "abholen", "abgeholt", "ab", "pick up", "picks up", "picked up",
     kAnimate | kThing},
};

struct Modal {
  const char* de_1sg;
  const char* de_2sg;
  const char* de_3sg;
  const char* de_1pl;
  const char* en_3sg;  // followed by the base form
  const char* en_other;
  const char* en_negated_3sg;
  const char* en_negated_other;
};

const Modal kModals[] = {
    {"will", "willst", "will", "wollen", "wants to", "want to", "does not want to", "do not want to"},
    {"kann", "kannst", "kann", "können", "can", "can", "cannot", "cannot"},
    {"muss", "musst", "muss", "müssen", "must", "must", "must not", "must not"},
};

struct Subject {
  std::string de;
  std::string en;
  int person;  // 0: 1sg, 1: 2sg, 2: 3sg, 3: 1pl
};

const char* const kFrontAdverbs[][2] = {{"heute", "today"}, {"morgen", "tomorrow"}, {"jetzt", "now"}};
const char* const kMidAdverbs[][2] = {{"oft", "often"}, {"immer", "always"}, {"selten", "rarely"}};
const char* const kClauseIntros[][2] = {{"ich weiß , dass", "i know that"},
                                        {"er sagt , dass", "he says that"},
                                        {"wir glauben , dass", "we think that"},
                                        {"die frau hofft , dass", "the woman hopes that"}};

// Portable uniform index (std distributions differ across standard libraries).
size_t pick(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }
template <typename T, size_t N>
const T& pick(std::mt19937_64& rng, const T (&items)[N]) {
  return items[pick(rng, N)];
}
bool chance(std::mt19937_64& rng, double p) { return static_cast<double>(rng() >> 11) * 0x1.0p-53 < p; }

std::string article(char gender, bool accusative) {
  if (gender == 'm') return accusative ? "den" : "der";
  return gender == 'f' ? "die" : "das";
}

Subject random_subject(std::mt19937_64& rng) {
  if (chance(rng, 0.3)) {
    static const Subject pronouns[] = {{"ich", "i", 0}, {"du", "you", 1}, {"er", "he", 2}, {"wir", "we", 3}};
    return pick(rng, pronouns);
  }
  size_t i;
  do i = pick(rng, std::size(kNouns));
  while (!(kNouns[i].tags & kAnimate));
  return {article(kNouns[i].gender, false) + " " + kNouns[i].de, std::string("the ") + kNouns[i].en, 2};
}

const char* conjugate(const Verb& v, int person) {
  const char* forms[] = {v.de_1sg, v.de_2sg, v.de_3sg, v.de_1pl};
  return forms[person];
}
const char* conjugate(const Modal& m, int person) {
  const char* forms[] = {m.de_1sg, m.de_2sg, m.de_3sg, m.de_1pl};
  return forms[person];
}
const char* haben(int person) {
  const char* forms[] = {"habe", "hast", "hat", "haben"};
  return forms[person];
}
std::string english_present(const Verb& v, int person) { return person == 2 ? v.en_3sg : v.en_base; }
std::string english_do_not(int person) { return person == 2 ? "does not" : "do not"; }

struct Object {
  std::string de, en;
};

Object random_object(std::mt19937_64& rng, const Verb& v, bool counted) {
  size_t i;
  do i = pick(rng, std::size(kNouns));
  while (!(kNouns[i].tags & v.objects));
  const Noun& n = kNouns[i];
  if (counted) {
    const int count = 2 + static_cast<int>(pick(rng, 98));
    return {german_number(count) + " " + n.de_plural, english_number(count) + " " + n.en_plural};
  }
  return {article(n.gender, true) + " " + n.de, std::string("the ") + n.en};
}

std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

// A clause in main-clause (verb second) or subordinate (verb final) order.
struct Clause {
  std::string de_main, de_subordinate, en;
  std::string de_inverted;  // verb before the subject, after a fronted adverb
};

Clause random_clause(std::mt19937_64& rng) {
  const Subject s = random_subject(rng);
  const Verb& v = pick(rng, kVerbs);
  const int kind = static_cast<int>(pick(rng, 6));  // 0-1 present, 2 negated, 3 modal, 4 perfect, 5 mid adverb
  const Object o = random_object(rng, v, kind <= 1 && chance(rng, 0.3));
  Clause c;
  const std::string fin = conjugate(v, s.person);
  switch (kind) {
    case 0:
    case 1:
      c.de_main = join({s.de, fin, o.de, v.prefix});
      c.de_inverted = join({fin, s.de, o.de, v.prefix});
      c.de_subordinate = join({s.de, o.de, std::string(v.prefix) + fin});
      c.en = join({s.en, english_present(v, s.person), o.en});
      break;
    case 2:
      c.de_main = join({s.de, fin, o.de, "nicht", v.prefix});
      c.de_inverted = join({fin, s.de, o.de, "nicht", v.prefix});
      c.de_subordinate = join({s.de, o.de, "nicht", std::string(v.prefix) + fin});
      c.en = join({s.en, english_do_not(s.person), v.en_base, o.en});
      break;
    case 3: {
      const Modal& m = pick(rng, kModals);
      const bool negated = chance(rng, 0.3);
      const std::string mfin = conjugate(m, s.person);
      const std::string nicht = negated ? "nicht" : "";
      c.de_main = join({s.de, mfin, o.de, nicht, v.infinitive});
      c.de_inverted = join({mfin, s.de, o.de, nicht, v.infinitive});
      c.de_subordinate = join({s.de, o.de, nicht, v.infinitive, mfin});
      const char* en_modal =
          negated ? (s.person == 2 ? m.en_negated_3sg : m.en_negated_other) : (s.person == 2 ? m.en_3sg : m.en_other);
      c.en = join({s.en, en_modal, v.en_base, o.en});
      break;
    }
    case 4: {
      const bool negated = chance(rng, 0.3);
      const std::string nicht = negated ? "nicht" : "";
      c.de_main = join({s.de, haben(s.person), o.de, nicht, v.participle});
      c.de_inverted = join({haben(s.person), s.de, o.de, nicht, v.participle});
      c.de_subordinate = join({s.de, o.de, nicht, v.participle, haben(s.person)});
      c.en = negated ? join({s.en, "did not", v.en_base, o.en}) : join({s.en, v.en_past, o.en});
      break;
    }
    default: {
      const auto& adverb = pick(rng, kMidAdverbs);
      c.de_main = join({s.de, fin, adverb[0], o.de, v.prefix});
      c.de_inverted = join({fin, s.de, adverb[0], o.de, v.prefix});
      c.de_subordinate = join({s.de, adverb[0], o.de, std::string(v.prefix) + fin});
      c.en = join({s.en, adverb[1], english_present(v, s.person), o.en});
      break;
    }
  }
  return c;
}

}  // namespace

std::string german_number(int n) {
  std::string out;
  auto add = [&](const std::string& word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  const int thousands = n / 1000, hundreds = (n / 100) % 10, rest = n % 100;
  if (thousands) add(german_unit_prefix(thousands) + " tausend");
  if (hundreds) add(german_unit_prefix(hundreds) + " hundert");
  if (rest >= 20) {
    const int units = rest % 10, tens = rest / 10;
    add(units ? german_unit_prefix(units) + " und " + kGermanTens[tens] : std::string(kGermanTens[tens]));
  } else if (rest >= 10) {
    add(kGermanTeens[rest - 10]);
  } else if (rest > 0) {
    add(kGermanUnits[rest]);
  }
  return out;
}

std::string english_number(int n) {
  std::string out;
  auto add = [&](const std::string& word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  const int thousands = n / 1000, hundreds = (n / 100) % 10, rest = n % 100;
  if (thousands) add(std::string(kEnglishSmall[thousands]) + " thousand");
  if (hundreds) add(std::string(kEnglishSmall[hundreds]) + " hundred");
  if (rest >= 20) {
    add(kEnglishTens[rest / 10]);
    if (rest % 10) add(kEnglishSmall[rest % 10]);
  } else if (rest > 0) {
    add(kEnglishSmall[rest]);
  }
  return out;
}

Pair random_pair(std::mt19937_64& rng, double number_fraction) {
  if (chance(rng, number_fraction)) {
    // Favour the compositional range 21..9999 but keep every size.
    const int n = chance(rng, 0.1) ? 1 + static_cast<int>(pick(rng, 99)) : 1 + static_cast<int>(pick(rng, 9999));
    return {german_number(n), english_number(n)};
  }
  const int form = static_cast<int>(pick(rng, 5));
  if (form == 0) {  // fronted adverb: verb second, subject after the verb
    const auto& adverb = pick(rng, kFrontAdverbs);
    const Clause c = random_clause(rng);
    return {join({adverb[0], c.de_inverted}), join({adverb[1], c.en})};
  }
  if (form == 1) {  // "ich weiß , dass ..." with the verb at the end
    const auto& intro = pick(rng, kClauseIntros);
    const Clause c = random_clause(rng);
    return {join({intro[0], c.de_subordinate}), join({intro[1], c.en})};
  }
  if (form == 2) {  // main clause + ", weil" subordinate clause
    const Clause a = random_clause(rng), b = random_clause(rng);
    return {join({a.de_main, ", weil", b.de_subordinate}), join({a.en, "because", b.en})};
  }
  const Clause c = random_clause(rng);
  return {c.de_main, c.en};
}

const char* task_level_name(TaskLevel level) { return level == TaskLevel::Hard ? "hard" : "quick"; }

TaskLevel parse_task_level(const std::string& name) {
  if (name == "quick") return TaskLevel::Quick;
  if (name == "hard") return TaskLevel::Hard;
  heed::fail("translate", "unknown task level '{}' (expected quick or hard)", name);
}

Corpus generate_corpus(const CorpusOptions& options) {
  std::mt19937_64 rng(options.seed);
  const size_t wanted = static_cast<size_t>(options.train_size + options.validation_size + options.test_size);
  std::vector<Pair> pool;
  std::unordered_set<std::string> seen;
  size_t attempts = 0;
  while (pool.size() < wanted && attempts < wanted * 50) {
    ++attempts;
    Pair p = options.level == TaskLevel::Hard ? random_hard_pair(rng) : random_pair(rng, options.number_fraction);
    if (seen.insert(p.source).second) pool.push_back(std::move(p));
  }
  Corpus corpus;
  // Held-out sets first, so a smaller training set never changes them.
  size_t at = 0;
  for (int i = 0; i < options.test_size && at < pool.size(); ++i) corpus.test.push_back(pool[at++]);
  for (int i = 0; i < options.validation_size && at < pool.size(); ++i) corpus.validation.push_back(pool[at++]);
  while (at < pool.size()) corpus.train.push_back(pool[at++]);
  return corpus;
}

std::vector<std::string> split_tokens(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) out.push_back(word);
  return out;
}

namespace {

const std::vector<std::string>& number_morphemes() {
  static const std::vector<std::string> morphemes = [] {
    std::vector<std::string> m = {"ein", "und", "hundert", "tausend"};
    for (int i = 1; i < 10; ++i) m.push_back(kGermanUnits[i]);
    for (const char* t : kGermanTeens) m.push_back(t);
    for (int i = 2; i < 10; ++i) m.push_back(kGermanTens[i]);
    std::sort(m.begin(), m.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    return m;
  }();
  return morphemes;
}

bool is_number_morpheme(const std::string& w) {
  const auto& m = number_morphemes();
  return std::find(m.begin(), m.end(), w) != m.end();
}

// Splits `word` entirely into number morphemes (longest first, with backtracking).
bool segment(const std::string& word, size_t at, std::vector<std::string>* parts) {
  if (at == word.size()) return true;
  for (const std::string& m : number_morphemes()) {
    if (word.compare(at, m.size(), m) == 0) {
      parts->push_back(m);
      if (segment(word, at + m.size(), parts)) return true;
      parts->pop_back();
    }
  }
  return false;
}

std::string to_lower_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  // German capitals with umlauts (UTF-8): Ä Ö Ü -> ä ö ü.
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xC3) {
      unsigned char& c = reinterpret_cast<unsigned char&>(s[i + 1]);
      if (c == 0x84 || c == 0x96 || c == 0x9C) c = static_cast<unsigned char>(c + 0x20);
    }
  }
  return s;
}

}  // namespace

std::vector<std::string> tokenize_german(const std::string& text) {
  std::string spaced;
  for (char c : to_lower_ascii(text)) {
    if (c == ',' || c == '.' || c == '!' || c == '?') {
      if (c == ',')
        spaced += " , ";
      else
        spaced += ' ';
    } else {
      spaced += c;
    }
  }
  std::vector<std::string> out;
  for (const std::string& word : split_tokens(spaced)) {
    std::vector<std::string> parts;
    if (!is_number_morpheme(word) && segment(word, 0, &parts) && parts.size() > 1) {
      out.insert(out.end(), parts.begin(), parts.end());
    } else {
      out.push_back(word);
    }
  }
  return out;
}

std::string detokenize_german(const std::vector<std::string>& tokens) {
  std::string out;
  bool previous_number = false;
  for (const std::string& t : tokens) {
    const bool number = is_number_morpheme(t);
    if (!out.empty() && !(number && previous_number) && t != ",") out += ' ';
    out += t;
    previous_number = number;
  }
  return out;
}

}  // namespace translate
