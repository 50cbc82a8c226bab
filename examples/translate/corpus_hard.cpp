// examples/translate/corpus_hard.cpp — the hard level of the synthetic German -> English corpus
// (`translate --task hard`, corpus.h): long sentences built from clauses, with a lexicon of
// about 2,000 German surface forms, so that a small model can neither memorise the training
// set nor reach a perfect score in minutes.
//
// Grammar (every rule has its English counterpart):
//  * noun phrases: definite or indefinite article, an optional adjective declined for gender,
//    case and article (der große hund / einen großen hund / große hunde), counted plurals with a
//    number phrase (siebenundvierzig rote äpfel -> forty seven red apples), proper names;
//  * main clauses verb-second, with a fronted adverb inverting subject and verb; separable verbs
//    send their prefix to the end; modal + infinitive and perfect (participle last);
//  * negation with nicht (English do-support) and kein (English "no");
//  * relative clauses on a subject or object noun (der mann , der den hund sieht , -> the man who
//    sees the dog; der hund , den der mann sieht , -> the dog that the man sees), verb-final;
//  * subordinate clauses with dass / weil / wenn / obwohl / bevor, verb-final;
//  * prepositional phrases with the dative (mit dem hund, im garten, an der brücke, neben den
//    häusern: dative plurals in -n) or the accusative (für den mann), at the end of the middle
//    field in German and at the end of the clause in English;
//  * coordination of main clauses with und / aber / oder.
// Invariants: deterministic from the generator's state (portable integer draws only); every
// token lower-case, separated by single spaces, commas as tokens; sentences up to about 40
// tokens.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "corpus.h"

namespace translate {

namespace {

size_t pick(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }
template <typename T, size_t N>
const T& pick(std::mt19937_64& rng, const T (&items)[N]) {
  return items[pick(rng, N)];
}
bool chance(std::mt19937_64& rng, double p) { return static_cast<double>(rng() >> 11) * 0x1.0p-53 < p; }

std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

// ---- lexicon --------------------------------------------------------------------------------

enum Kind : unsigned {
  kPerson = 1,
  kAnimal = 2,
  kFood = 4,
  kReadable = 8,
  kOpenable = 16,
  kObject = 32,
  kVehicle = 64,
  kBuilding = 128,
  kPlant = 256,
  kTool = 512,
  kClothing = 1024,
  kInstrument = 2048,
};
constexpr unsigned kAnimate = kPerson | kAnimal;
constexpr unsigned kThing =
    kFood | kReadable | kOpenable | kObject | kVehicle | kBuilding | kPlant | kTool | kClothing | kInstrument;

struct Noun {
  char gender;  // 'm', 'f', 'n'
  const char* de;
  const char* de_plural;
  const char* en;
  const char* en_plural;
  unsigned kind;
};

// clang-format off
const Noun kHardNouns[] = {
    {'m', "mann", "männer", "man", "men", kPerson},
    {'f', "frau", "frauen", "woman", "women", kPerson},
    {'n', "kind", "kinder", "child", "children", kPerson},
    {'m', "junge", "jungen", "boy", "boys", kPerson},
    {'n', "mädchen", "mädchen", "girl", "girls", kPerson},
    {'m', "lehrer", "lehrer", "teacher", "teachers", kPerson},
    {'f', "lehrerin", "lehrerinnen", "teacher", "teachers", kPerson},
    {'m', "arzt", "ärzte", "doctor", "doctors", kPerson},
    {'f', "ärztin", "ärztinnen", "doctor", "doctors", kPerson},
    {'m', "vater", "väter", "father", "fathers", kPerson},
    {'f', "mutter", "mütter", "mother", "mothers", kPerson},
    {'m', "bruder", "brüder", "brother", "brothers", kPerson},
    {'f', "schwester", "schwestern", "sister", "sisters", kPerson},
    {'m', "freund", "freunde", "friend", "friends", kPerson},
    {'f', "freundin", "freundinnen", "friend", "friends", kPerson},
    {'m', "nachbar", "nachbarn", "neighbour", "neighbours", kPerson},
    {'f', "nachbarin", "nachbarinnen", "neighbour", "neighbours", kPerson},
    {'m', "koch", "köche", "cook", "cooks", kPerson},
    {'f', "köchin", "köchinnen", "cook", "cooks", kPerson},
    {'m', "bauer", "bauern", "farmer", "farmers", kPerson},
    {'m', "student", "studenten", "student", "students", kPerson},
    {'f', "studentin", "studentinnen", "student", "students", kPerson},
    {'m', "soldat", "soldaten", "soldier", "soldiers", kPerson},
    {'m', "könig", "könige", "king", "kings", kPerson},
    {'f', "königin", "königinnen", "queen", "queens", kPerson},
    {'m', "polizist", "polizisten", "police officer", "police officers", kPerson},
    {'m', "fahrer", "fahrer", "driver", "drivers", kPerson},
    {'m', "maler", "maler", "painter", "painters", kPerson},
    {'m', "sänger", "sänger", "singer", "singers", kPerson},
    {'f', "sängerin", "sängerinnen", "singer", "singers", kPerson},
    {'m', "gast", "gäste", "guest", "guests", kPerson},
    {'m', "kunde", "kunden", "customer", "customers", kPerson},
    {'m', "chef", "chefs", "boss", "bosses", kPerson},
    {'m', "onkel", "onkel", "uncle", "uncles", kPerson},
    {'f', "tante", "tanten", "aunt", "aunts", kPerson},
    {'m', "großvater", "großväter", "grandfather", "grandfathers", kPerson},
    {'f', "großmutter", "großmütter", "grandmother", "grandmothers", kPerson},
    {'m', "hund", "hunde", "dog", "dogs", kAnimal},
    {'f', "katze", "katzen", "cat", "cats", kAnimal},
    {'n', "pferd", "pferde", "horse", "horses", kAnimal},
    {'f', "kuh", "kühe", "cow", "cows", kAnimal},
    {'m', "vogel", "vögel", "bird", "birds", kAnimal},
    {'m', "fisch", "fische", "fish", "fish", kAnimal | kFood},
    {'f', "maus", "mäuse", "mouse", "mice", kAnimal},
    {'n', "schaf", "schafe", "sheep", "sheep", kAnimal},
    {'m', "bär", "bären", "bear", "bears", kAnimal},
    {'m', "wolf", "wölfe", "wolf", "wolves", kAnimal},
    {'m', "fuchs", "füchse", "fox", "foxes", kAnimal},
    {'f', "ente", "enten", "duck", "ducks", kAnimal},
    {'m', "hase", "hasen", "hare", "hares", kAnimal},
    {'n', "huhn", "hühner", "chicken", "chickens", kAnimal | kFood},
    {'m', "apfel", "äpfel", "apple", "apples", kFood},
    {'f', "birne", "birnen", "pear", "pears", kFood},
    {'f', "banane", "bananen", "banana", "bananas", kFood},
    {'m', "kuchen", "kuchen", "cake", "cakes", kFood},
    {'n', "brot", "brote", "bread", "breads", kFood},
    {'f', "suppe", "suppen", "soup", "soups", kFood},
    {'m', "käse", "käse", "cheese", "cheeses", kFood},
    {'f', "tomate", "tomaten", "tomato", "tomatoes", kFood},
    {'f', "kartoffel", "kartoffeln", "potato", "potatoes", kFood},
    {'n', "ei", "eier", "egg", "eggs", kFood},
    {'f', "wurst", "würste", "sausage", "sausages", kFood},
    {'f', "orange", "orangen", "orange", "oranges", kFood},
    {'f', "nuss", "nüsse", "nut", "nuts", kFood},
    {'n', "buch", "bücher", "book", "books", kReadable | kOpenable},
    {'f', "zeitung", "zeitungen", "newspaper", "newspapers", kReadable},
    {'m', "brief", "briefe", "letter", "letters", kReadable | kOpenable},
    {'f', "karte", "karten", "map", "maps", kReadable},
    {'n', "gedicht", "gedichte", "poem", "poems", kReadable},
    {'f', "geschichte", "geschichten", "story", "stories", kReadable},
    {'n', "heft", "hefte", "notebook", "notebooks", kReadable | kOpenable},
    {'f', "nachricht", "nachrichten", "message", "messages", kReadable},
    {'n', "fenster", "fenster", "window", "windows", kOpenable | kObject},
    {'f', "tür", "türen", "door", "doors", kOpenable | kObject},
    {'f', "tasche", "taschen", "bag", "bags", kOpenable | kObject},
    {'f', "flasche", "flaschen", "bottle", "bottles", kOpenable | kObject},
    {'f', "kiste", "kisten", "box", "boxes", kOpenable | kObject},
    {'m', "schrank", "schränke", "cupboard", "cupboards", kOpenable | kObject},
    {'m', "koffer", "koffer", "suitcase", "suitcases", kOpenable | kObject},
    {'m', "ball", "bälle", "ball", "balls", kObject},
    {'m', "tisch", "tische", "table", "tables", kObject},
    {'m', "stuhl", "stühle", "chair", "chairs", kObject},
    {'f', "lampe", "lampen", "lamp", "lamps", kObject},
    {'n', "bild", "bilder", "picture", "pictures", kObject},
    {'m', "schlüssel", "schlüssel", "key", "keys", kObject | kTool},
    {'f', "uhr", "uhren", "clock", "clocks", kObject},
    {'n', "glas", "gläser", "glass", "glasses", kObject},
    {'f', "tasse", "tassen", "cup", "cups", kObject},
    {'m', "teller", "teller", "plate", "plates", kObject},
    {'n', "messer", "messer", "knife", "knives", kTool},
    {'m', "hammer", "hämmer", "hammer", "hammers", kTool},
    {'f', "schere", "scheren", "pair of scissors", "scissors", kTool},
    {'m', "stift", "stifte", "pen", "pens", kTool},
    {'n', "seil", "seile", "rope", "ropes", kTool},
    {'n', "auto", "autos", "car", "cars", kVehicle},
    {'m', "zug", "züge", "train", "trains", kVehicle},
    {'n', "fahrrad", "fahrräder", "bicycle", "bicycles", kVehicle},
    {'n', "boot", "boote", "boat", "boats", kVehicle},
    {'m', "bus", "busse", "bus", "buses", kVehicle},
    {'n', "haus", "häuser", "house", "houses", kBuilding},
    {'f', "kirche", "kirchen", "church", "churches", kBuilding},
    {'f', "schule", "schulen", "school", "schools", kBuilding},
    {'m', "turm", "türme", "tower", "towers", kBuilding},
    {'f', "brücke", "brücken", "bridge", "bridges", kBuilding},
    {'m', "bahnhof", "bahnhöfe", "station", "stations", kBuilding},
    {'f', "blume", "blumen", "flower", "flowers", kPlant},
    {'m', "baum", "bäume", "tree", "trees", kPlant},
    {'f', "rose", "rosen", "rose", "roses", kPlant},
    {'m', "mantel", "mäntel", "coat", "coats", kClothing},
    {'m', "hut", "hüte", "hat", "hats", kClothing},
    {'n', "hemd", "hemden", "shirt", "shirts", kClothing},
    {'m', "schuh", "schuhe", "shoe", "shoes", kClothing},
    {'n', "kleid", "kleider", "dress", "dresses", kClothing},
    {'f', "gitarre", "gitarren", "guitar", "guitars", kInstrument},
    {'n', "klavier", "klaviere", "piano", "pianos", kInstrument},
    {'f', "geige", "geigen", "violin", "violins", kInstrument},
    {'f', "trommel", "trommeln", "drum", "drums", kInstrument},
    {'m', "garten", "gärten", "garden", "gardens", kBuilding},
    {'f', "stadt", "städte", "town", "towns", kBuilding},
    {'n', "dorf", "dörfer", "village", "villages", kBuilding},
    {'n', "schloss", "schlösser", "castle", "castles", kBuilding},
    {'f', "hütte", "hütten", "hut", "huts", kBuilding},
    {'n', "zimmer", "zimmer", "room", "rooms", kBuilding},
    {'f', "küche", "küchen", "kitchen", "kitchens", kBuilding},
    {'m', "laden", "läden", "shop", "shops", kBuilding},
    {'n', "hotel", "hotels", "hotel", "hotels", kBuilding},
    {'f', "mühle", "mühlen", "mill", "mills", kBuilding},
    {'m', "stall", "ställe", "stable", "stables", kBuilding},
    {'f', "mauer", "mauern", "wall", "walls", kBuilding},
    {'f', "kerze", "kerzen", "candle", "candles", kObject},
    {'m', "spiegel", "spiegel", "mirror", "mirrors", kObject},
    {'m', "teppich", "teppiche", "carpet", "carpets", kObject},
    {'n', "kissen", "kissen", "pillow", "pillows", kObject},
    {'f', "decke", "decken", "blanket", "blankets", kObject},
    {'m', "topf", "töpfe", "pot", "pots", kObject},
    {'m', "löffel", "löffel", "spoon", "spoons", kObject | kTool},
    {'f', "gabel", "gabeln", "fork", "forks", kObject | kTool},
    {'m', "korb", "körbe", "basket", "baskets", kOpenable | kObject},
    {'m', "eimer", "eimer", "bucket", "buckets", kObject},
    {'n', "geschenk", "geschenke", "present", "presents", kOpenable | kObject},
    {'n', "paket", "pakete", "parcel", "parcels", kOpenable | kObject},
    {'m', "umschlag", "umschläge", "envelope", "envelopes", kOpenable | kObject},
    {'f', "dose", "dosen", "tin", "tins", kOpenable | kObject},
    {'m', "computer", "computer", "computer", "computers", kObject},
    {'n', "telefon", "telefone", "telephone", "telephones", kObject},
    {'f', "kamera", "kameras", "camera", "cameras", kObject},
    {'m', "ring", "ringe", "ring", "rings", kObject},
    {'f', "kette", "ketten", "necklace", "necklaces", kObject},
    {'m', "besen", "besen", "broom", "brooms", kTool},
    {'f', "säge", "sägen", "saw", "saws", kTool},
    {'f', "leiter", "leitern", "ladder", "ladders", kTool},
    {'m', "pinsel", "pinsel", "brush", "brushes", kTool},
    {'m', "nagel", "nägel", "nail", "nails", kTool},
    {'m', "schal", "schals", "scarf", "scarves", kClothing},
    {'f', "hose", "hosen", "pair of trousers", "trousers", kClothing},
    {'f', "jacke", "jacken", "jacket", "jackets", kClothing},
    {'m', "rock", "röcke", "skirt", "skirts", kClothing},
    {'m', "handschuh", "handschuhe", "glove", "gloves", kClothing},
    {'f', "mütze", "mützen", "cap", "caps", kClothing},
    {'m', "stiefel", "stiefel", "boot", "boots", kClothing},
    {'f', "flöte", "flöten", "flute", "flutes", kInstrument},
    {'f', "trompete", "trompeten", "trumpet", "trumpets", kInstrument},
    {'f', "harfe", "harfen", "harp", "harps", kInstrument},
    {'n', "flugzeug", "flugzeuge", "plane", "planes", kVehicle},
    {'m', "wagen", "wagen", "cart", "carts", kVehicle},
    {'n', "schiff", "schiffe", "ship", "ships", kVehicle},
    {'m', "traktor", "traktoren", "tractor", "tractors", kVehicle},
    {'f', "tanne", "tannen", "fir", "firs", kPlant},
    {'f', "eiche", "eichen", "oak", "oaks", kPlant},
    {'m', "strauch", "sträucher", "bush", "bushes", kPlant},
    {'f', "tulpe", "tulpen", "tulip", "tulips", kPlant},
    {'n', "gras", "gräser", "grass", "grasses", kPlant},
    {'f', "pflanze", "pflanzen", "plant", "plants", kPlant},
    {'f', "kirsche", "kirschen", "cherry", "cherries", kFood},
    {'f', "zwiebel", "zwiebeln", "onion", "onions", kFood},
    {'m', "salat", "salate", "salad", "salads", kFood},
    {'f', "torte", "torten", "tart", "tarts", kFood},
    {'m', "keks", "kekse", "biscuit", "biscuits", kFood},
    {'f', "pflaume", "pflaumen", "plum", "plums", kFood},
    {'f', "erdbeere", "erdbeeren", "strawberry", "strawberries", kFood},
    {'f', "gurke", "gurken", "cucumber", "cucumbers", kFood},
    {'n', "brötchen", "brötchen", "roll", "rolls", kFood},
    {'m', "hering", "heringe", "herring", "herrings", kFood | kAnimal},
    {'f', "ziege", "ziegen", "goat", "goats", kAnimal},
    {'n', "schwein", "schweine", "pig", "pigs", kAnimal},
    {'m', "esel", "esel", "donkey", "donkeys", kAnimal},
    {'f', "gans", "gänse", "goose", "geese", kAnimal},
    {'m', "frosch", "frösche", "frog", "frogs", kAnimal},
    {'f', "eule", "eulen", "owl", "owls", kAnimal},
    {'m', "igel", "igel", "hedgehog", "hedgehogs", kAnimal},
    {'f', "schlange", "schlangen", "snake", "snakes", kAnimal},
    {'m', "affe", "affen", "monkey", "monkeys", kAnimal},
    {'m', "löwe", "löwen", "lion", "lions", kAnimal},
    {'m', "tiger", "tiger", "tiger", "tigers", kAnimal},
    {'m', "pilot", "piloten", "pilot", "pilots", kPerson},
    {'m', "richter", "richter", "judge", "judges", kPerson},
    {'f', "richterin", "richterinnen", "judge", "judges", kPerson},
    {'m', "bäcker", "bäcker", "baker", "bakers", kPerson},
    {'f', "bäckerin", "bäckerinnen", "baker", "bakers", kPerson},
    {'m', "fischer", "fischer", "fisherman", "fishermen", kPerson},
    {'m', "gärtner", "gärtner", "gardener", "gardeners", kPerson},
    {'f', "gärtnerin", "gärtnerinnen", "gardener", "gardeners", kPerson},
    {'m', "dichter", "dichter", "poet", "poets", kPerson},
    {'m', "prinz", "prinzen", "prince", "princes", kPerson},
    {'f', "prinzessin", "prinzessinnen", "princess", "princesses", kPerson},
    {'m', "sohn", "söhne", "son", "sons", kPerson},
    {'f', "tochter", "töchter", "daughter", "daughters", kPerson},
    {'m', "enkel", "enkel", "grandson", "grandsons", kPerson},
    {'f', "enkelin", "enkelinnen", "granddaughter", "granddaughters", kPerson},
    {'m', "räuber", "räuber", "robber", "robbers", kPerson},
    {'m', "zauberer", "zauberer", "wizard", "wizards", kPerson},
    {'f', "hexe", "hexen", "witch", "witches", kPerson},
    {'m', "riese", "riesen", "giant", "giants", kPerson},
    {'m', "zwerg", "zwerge", "dwarf", "dwarfs", kPerson},
    {'m', "schüler", "schüler", "pupil", "pupils", kPerson},
    {'f', "schülerin", "schülerinnen", "pupil", "pupils", kPerson},
    {'m', "tänzer", "tänzer", "dancer", "dancers", kPerson},
    {'f', "tänzerin", "tänzerinnen", "dancer", "dancers", kPerson},
    {'m', "kellner", "kellner", "waiter", "waiters", kPerson},
    {'f', "kellnerin", "kellnerinnen", "waitress", "waitresses", kPerson},
    {'m', "ritter", "ritter", "knight", "knights", kPerson},
    {'m', "hirte", "hirten", "shepherd", "shepherds", kPerson},
    {'m', "matrose", "matrosen", "sailor", "sailors", kPerson},
    {'m', "künstler", "künstler", "artist", "artists", kPerson},
    {'f', "künstlerin", "künstlerinnen", "artist", "artists", kPerson},
    {'m', "besucher", "besucher", "visitor", "visitors", kPerson},
    {'f', "oma", "omas", "grandma", "grandmas", kPerson},
    {'m', "opa", "opas", "grandpa", "grandpas", kPerson},
    {'n', "baby", "babys", "baby", "babies", kPerson},
    {'m', "cousin", "cousins", "cousin", "cousins", kPerson},
    {'f', "biene", "bienen", "bee", "bees", kAnimal},
    {'m', "hirsch", "hirsche", "deer", "deer", kAnimal},
    {'n', "kaninchen", "kaninchen", "rabbit", "rabbits", kAnimal},
    {'f', "taube", "tauben", "pigeon", "pigeons", kAnimal},
    {'m', "papagei", "papageien", "parrot", "parrots", kAnimal},
    {'n', "kamel", "kamele", "camel", "camels", kAnimal},
    {'m', "elefant", "elefanten", "elephant", "elephants", kAnimal},
    {'f', "spinne", "spinnen", "spider", "spiders", kAnimal},
    {'m', "hahn", "hähne", "rooster", "roosters", kAnimal},
    {'n', "lamm", "lämmer", "lamb", "lambs", kAnimal},
    {'f', "zitrone", "zitronen", "lemon", "lemons", kFood},
    {'f', "karotte", "karotten", "carrot", "carrots", kFood},
    {'m', "pfirsich", "pfirsiche", "peach", "peaches", kFood},
    {'f', "pizza", "pizzas", "pizza", "pizzas", kFood},
    {'f', "melone", "melonen", "melon", "melons", kFood},
    {'f', "traube", "trauben", "grape", "grapes", kFood},
    {'m', "pilz", "pilze", "mushroom", "mushrooms", kFood | kPlant},
    {'f', "zeitschrift", "zeitschriften", "magazine", "magazines", kReadable},
    {'f', "rechnung", "rechnungen", "bill", "bills", kReadable},
    {'n', "märchen", "märchen", "fairy tale", "fairy tales", kReadable},
    {'m', "roman", "romane", "novel", "novels", kReadable},
    {'f', "liste", "listen", "list", "lists", kReadable},
    {'n', "rezept", "rezepte", "recipe", "recipes", kReadable},
    {'n', "sofa", "sofas", "sofa", "sofas", kObject},
    {'n', "bett", "betten", "bed", "beds", kObject},
    {'m', "kühlschrank", "kühlschränke", "fridge", "fridges", kOpenable | kObject},
    {'m', "regenschirm", "regenschirme", "umbrella", "umbrellas", kOpenable | kObject},
    {'f', "vase", "vasen", "vase", "vases", kObject},
    {'f', "puppe", "puppen", "doll", "dolls", kObject},
    {'m', "kamm", "kämme", "comb", "combs", kObject},
    {'n', "radio", "radios", "radio", "radios", kObject},
    {'m', "fernseher", "fernseher", "television", "televisions", kObject},
    {'f', "axt", "äxte", "axe", "axes", kTool},
    {'f', "schaufel", "schaufeln", "shovel", "shovels", kTool},
    {'m', "schraubenzieher", "schraubenzieher", "screwdriver", "screwdrivers", kTool},
    {'m', "rechen", "rechen", "rake", "rakes", kTool},
    {'m', "pullover", "pullover", "jumper", "jumpers", kClothing},
    {'f', "krawatte", "krawatten", "tie", "ties", kClothing},
    {'m', "gürtel", "gürtel", "belt", "belts", kClothing},
    {'m', "anzug", "anzüge", "suit", "suits", kClothing},
    {'f', "bluse", "blusen", "blouse", "blouses", kClothing},
    {'f', "orgel", "orgeln", "organ", "organs", kInstrument},
    {'n', "cello", "cellos", "cello", "cellos", kInstrument},
    {'n', "horn", "hörner", "horn", "horns", kInstrument},
    {'m', "park", "parks", "park", "parks", kBuilding},
    {'m', "wald", "wälder", "forest", "forests", kBuilding},
    {'f', "straße", "straßen", "street", "streets", kBuilding},
    {'m', "markt", "märkte", "market", "markets", kBuilding},
    {'n', "museum", "museen", "museum", "museums", kBuilding},
    {'f', "bibliothek", "bibliotheken", "library", "libraries", kBuilding},
    {'m', "hafen", "häfen", "harbour", "harbours", kBuilding},
    {'n', "theater", "theater", "theatre", "theatres", kBuilding},
    {'m', "palast", "paläste", "palace", "palaces", kBuilding},
    {'f', "scheune", "scheunen", "barn", "barns", kBuilding},
    {'n', "motorrad", "motorräder", "motorbike", "motorbikes", kVehicle},
    {'m', "lastwagen", "lastwagen", "lorry", "lorries", kVehicle},
    {'f', "kutsche", "kutschen", "coach", "coaches", kVehicle},
    {'m', "roller", "roller", "scooter", "scooters", kVehicle},
    {'f', "palme", "palmen", "palm", "palms", kPlant},
    {'f', "birke", "birken", "birch", "birches", kPlant},
    {'m', "kaktus", "kakteen", "cactus", "cacti", kPlant},
    {'f', "lilie", "lilien", "lily", "lilies", kPlant},
};

const char* const kNames[] = {
    "anna", "peter", "maria", "thomas", "julia", "michael", "laura", "stefan", "sophie", "lukas", "lena", "jonas",
    "clara", "felix", "emma", "paul", "hanna", "david", "mia", "simon", "nina", "tobias", "sara", "martin",
    "eva", "daniel", "lisa", "jan", "marie", "tim", "paula", "moritz", "greta", "leon", "ida", "max", "frieda",
    "oskar", "rosa", "karl", "ella", "hugo", "alma", "otto", "ruth", "emil", "vera", "anton", "luise", "bruno",
};

// Adjective stems take the endings of their position (see adjective_form); "" marks the
// English that does not change.
struct Adjective {
  const char* de;
  const char* en;
};
const Adjective kAdjectives[] = {
    {"groß", "big"},      {"klein", "small"},    {"alt", "old"},        {"jung", "young"},     {"neu", "new"},
    {"rot", "red"},       {"blau", "blue"},      {"grün", "green"},     {"gelb", "yellow"},    {"schwarz", "black"},
    {"weiß", "white"},    {"braun", "brown"},    {"grau", "grey"},      {"schön", "beautiful"}, {"hässlich", "ugly"},
    {"lang", "long"},     {"kurz", "short"},     {"schwer", "heavy"},   {"leicht", "light"},   {"warm", "warm"},
    {"kalt", "cold"},     {"billig", "cheap"},   {"teuer", "expensive"}, {"müde", "tired"},    {"klug", "clever"},
    {"lustig", "funny"},  {"traurig", "sad"},    {"froh", "happy"},     {"laut", "loud"},      {"leise", "quiet"},
    {"schnell", "fast"},  {"langsam", "slow"},   {"fremd", "strange"},  {"freundlich", "friendly"},
    {"wild", "wild"},     {"ruhig", "calm"},     {"stark", "strong"},   {"schwach", "weak"},   {"sauber", "clean"},
    {"schmutzig", "dirty"}, {"voll", "full"},    {"leer", "empty"},     {"frisch", "fresh"},   {"süß", "sweet"},
    {"bitter", "bitter"}, {"hoch", "tall"},      {"tief", "deep"},      {"breit", "wide"},     {"dünn", "thin"},
    {"dick", "thick"},    {"hell", "bright"},    {"dunkel", "dark"},    {"reich", "rich"},     {"arm", "poor"},
    {"berühmt", "famous"}, {"höflich", "polite"}, {"neugierig", "curious"}, {"fleißig", "hard-working"},
    {"faul", "lazy"},     {"mutig", "brave"},   {"ehrlich", "honest"}, {"gefährlich", "dangerous"},
    {"bekannt", "well-known"}, {"gesund", "healthy"}, {"krank", "ill"}, {"hungrig", "hungry"},
    {"durstig", "thirsty"}, {"nass", "wet"}, {"trocken", "dry"}, {"weich", "soft"}, {"hart", "hard"},
    {"rund", "round"}, {"eckig", "square"}, {"glücklich", "lucky"}, {"wütend", "angry"}, {"stolz", "proud"},
    {"einsam", "lonely"}, {"gemütlich", "cosy"}, {"prächtig", "splendid"}, {"winzig", "tiny"},
    {"riesig", "huge"}, {"modern", "modern"}, {"bunt", "colourful"}, {"golden", "golden"},
    {"silbern", "silver"}, {"hölzern", "wooden"}, {"scharf", "sharp"}, {"stumpf", "blunt"},
};
// clang-format on

// A transitive (or, with objects == 0, intransitive) verb: German present forms for ich, du,
// er/sie/es, wir, ihr, sie (plural); infinitive and participle with a separable prefix attached.
struct Verb {
  std::array<const char*, 6> de;
  const char* infinitive;
  const char* participle;
  const char* prefix;     // separable prefix ("" if none): last in a main clause
  const char* en_base;    // "look at"
  const char* en_3sg;     // "looks at"
  const char* en_past;    // "looked at"
  const char* en_object;  // particle after the object ("up" in "pick the dog up"), or ""
  unsigned objects;       // kinds it takes; 0: intransitive
};

// clang-format off
const Verb kHardVerbs[] = {
    {{"sehe", "siehst", "sieht", "sehen", "seht", "sehen"}, "sehen", "gesehen", "", "see", "sees", "saw", "", kAnimate | kThing},
    {{"kaufe", "kaufst", "kauft", "kaufen", "kauft", "kaufen"}, "kaufen", "gekauft", "", "buy", "buys", "bought", "", kThing & ~kBuilding},
    {{"verkaufe", "verkaufst", "verkauft", "verkaufen", "verkauft", "verkaufen"}, "verkaufen", "verkauft", "", "sell", "sells", "sold", "", kThing & ~kBuilding},
    {{"lese", "liest", "liest", "lesen", "lest", "lesen"}, "lesen", "gelesen", "", "read", "reads", "read", "", kReadable},
    {{"schreibe", "schreibst", "schreibt", "schreiben", "schreibt", "schreiben"}, "schreiben", "geschrieben", "", "write", "writes", "wrote", "", kReadable},
    {{"finde", "findest", "findet", "finden", "findet", "finden"}, "finden", "gefunden", "", "find", "finds", "found", "", kAnimate | kThing},
    {{"brauche", "brauchst", "braucht", "brauchen", "braucht", "brauchen"}, "brauchen", "gebraucht", "", "need", "needs", "needed", "", kAnimate | kThing},
    {{"esse", "isst", "isst", "essen", "esst", "essen"}, "essen", "gegessen", "", "eat", "eats", "ate", "", kFood},
    {{"koche", "kochst", "kocht", "kochen", "kocht", "kochen"}, "kochen", "gekocht", "", "cook", "cooks", "cooked", "", kFood},
    {{"suche", "suchst", "sucht", "suchen", "sucht", "suchen"}, "suchen", "gesucht", "", "look for", "looks for", "looked for", "", kAnimate | kThing},
    {{"male", "malst", "malt", "malen", "malt", "malen"}, "malen", "gemalt", "", "paint", "paints", "painted", "", kAnimate | kThing},
    {{"trage", "trägst", "trägt", "tragen", "tragt", "tragen"}, "tragen", "getragen", "", "carry", "carries", "carried", "", kThing & ~(kBuilding | kVehicle)},
    {{"liebe", "liebst", "liebt", "lieben", "liebt", "lieben"}, "lieben", "geliebt", "", "love", "loves", "loved", "", kAnimate | kThing},
    {{"hasse", "hasst", "hasst", "hassen", "hasst", "hassen"}, "hassen", "gehasst", "", "hate", "hates", "hated", "", kAnimate | kThing},
    {{"besuche", "besuchst", "besucht", "besuchen", "besucht", "besuchen"}, "besuchen", "besucht", "", "visit", "visits", "visited", "", kPerson | kBuilding},
    {{"frage", "fragst", "fragt", "fragen", "fragt", "fragen"}, "fragen", "gefragt", "", "ask", "asks", "asked", "", kPerson},
    {{"kenne", "kennst", "kennt", "kennen", "kennt", "kennen"}, "kennen", "gekannt", "", "know", "knows", "knew", "", kAnimate | kThing},
    {{"höre", "hörst", "hört", "hören", "hört", "hören"}, "hören", "gehört", "", "hear", "hears", "heard", "", kAnimate | kInstrument},
    {{"spiele", "spielst", "spielt", "spielen", "spielt", "spielen"}, "spielen", "gespielt", "", "play", "plays", "played", "", kInstrument},
    {{"wasche", "wäschst", "wäscht", "waschen", "wascht", "waschen"}, "waschen", "gewaschen", "", "wash", "washes", "washed", "", kAnimate | kObject | kClothing | kVehicle},
    {{"baue", "baust", "baut", "bauen", "baut", "bauen"}, "bauen", "gebaut", "", "build", "builds", "built", "", kBuilding | kVehicle | kObject},
    {{"zeichne", "zeichnest", "zeichnet", "zeichnen", "zeichnet", "zeichnen"}, "zeichnen", "gezeichnet", "", "draw", "draws", "drew", "", kAnimate | kThing},
    {{"fange", "fängst", "fängt", "fangen", "fangt", "fangen"}, "fangen", "gefangen", "", "catch", "catches", "caught", "", kAnimal | kObject},
    {{"füttere", "fütterst", "füttert", "füttern", "füttert", "füttern"}, "füttern", "gefüttert", "", "feed", "feeds", "fed", "", kAnimal},
    {{"vergesse", "vergisst", "vergisst", "vergessen", "vergesst", "vergessen"}, "vergessen", "vergessen", "", "forget", "forgets", "forgot", "", kAnimate | kThing},
    {{"nehme", "nimmst", "nimmt", "nehmen", "nehmt", "nehmen"}, "nehmen", "genommen", "", "take", "takes", "took", "", kThing & ~kBuilding},
    {{"bringe", "bringst", "bringt", "bringen", "bringt", "bringen"}, "bringen", "gebracht", "", "bring", "brings", "brought", "", kAnimate | (kThing & ~kBuilding)},
    {{"zeige", "zeigst", "zeigt", "zeigen", "zeigt", "zeigen"}, "zeigen", "gezeigt", "", "show", "shows", "showed", "", kThing},
    {{"verliere", "verlierst", "verliert", "verlieren", "verliert", "verlieren"}, "verlieren", "verloren", "", "lose", "loses", "lost", "", kThing & ~kBuilding},
    {{"mache", "machst", "macht", "machen", "macht", "machen"}, "aufmachen", "aufgemacht", "auf", "open", "opens", "opened", "", kOpenable},
    {{"mache", "machst", "macht", "machen", "macht", "machen"}, "zumachen", "zugemacht", "zu", "close", "closes", "closed", "", kOpenable},
    {{"rufe", "rufst", "ruft", "rufen", "ruft", "rufen"}, "anrufen", "angerufen", "an", "call", "calls", "called", "", kPerson},
    {{"hole", "holst", "holt", "holen", "holt", "holen"}, "abholen", "abgeholt", "ab", "pick up", "picks up", "picked up", "", kAnimate | (kThing & ~kBuilding)},
    {{"sehe", "siehst", "sieht", "sehen", "seht", "sehen"}, "ansehen", "angesehen", "an", "look at", "looks at", "looked at", "", kAnimate | kThing},
    {{"räume", "räumst", "räumt", "räumen", "räumt", "räumen"}, "aufräumen", "aufgeräumt", "auf", "tidy up", "tidies up", "tidied up", "", kObject | kBuilding},
    {{"lade", "lädst", "lädt", "laden", "ladet", "laden"}, "einladen", "eingeladen", "ein", "invite", "invites", "invited", "", kPerson},
    {{"ziehe", "ziehst", "zieht", "ziehen", "zieht", "ziehen"}, "anziehen", "angezogen", "an", "put on", "puts on", "put on", "", kClothing},
    {{"schalte", "schaltest", "schaltet", "schalten", "schaltet", "schalten"}, "einschalten", "eingeschaltet", "ein", "switch on", "switches on", "switched on", "", kObject},
    {{"bringe", "bringst", "bringt", "bringen", "bringt", "bringen"}, "mitbringen", "mitgebracht", "mit", "bring along", "brings along", "brought along", "", kAnimate | (kThing & ~kBuilding)},
    {{"schlafe", "schläfst", "schläft", "schlafen", "schlaft", "schlafen"}, "schlafen", "geschlafen", "", "sleep", "sleeps", "slept", "", 0},
    {{"arbeite", "arbeitest", "arbeitet", "arbeiten", "arbeitet", "arbeiten"}, "arbeiten", "gearbeitet", "", "work", "works", "worked", "", 0},
    {{"lache", "lachst", "lacht", "lachen", "lacht", "lachen"}, "lachen", "gelacht", "", "laugh", "laughs", "laughed", "", 0},
    {{"warte", "wartest", "wartet", "warten", "wartet", "warten"}, "warten", "gewartet", "", "wait", "waits", "waited", "", 0},
    {{"singe", "singst", "singt", "singen", "singt", "singen"}, "singen", "gesungen", "", "sing", "sings", "sang", "", 0},
    {{"tanze", "tanzt", "tanzt", "tanzen", "tanzt", "tanzen"}, "tanzen", "getanzt", "", "dance", "dances", "danced", "", 0},
    {{"weine", "weinst", "weint", "weinen", "weint", "weinen"}, "weinen", "geweint", "", "cry", "cries", "cried", "", 0},
    {{"stehe", "stehst", "steht", "stehen", "steht", "stehen"}, "aufstehen", "aufgestanden", "auf", "get up", "gets up", "got up", "", 0},
    {{"kaufe", "kaufst", "kauft", "kaufen", "kauft", "kaufen"}, "einkaufen", "eingekauft", "ein", "go shopping", "goes shopping", "went shopping", "", 0},
    {{"putze", "putzt", "putzt", "putzen", "putzt", "putzen"}, "putzen", "geputzt", "", "clean", "cleans", "cleaned", "", kObject | kVehicle | kBuilding | kClothing},
    {{"repariere", "reparierst", "repariert", "reparieren", "repariert", "reparieren"}, "reparieren", "repariert", "", "repair", "repairs", "repaired", "", kObject | kVehicle | kTool | kInstrument},
    {{"bezahle", "bezahlst", "bezahlt", "bezahlen", "bezahlt", "bezahlen"}, "bezahlen", "bezahlt", "", "pay for", "pays for", "paid for", "", kThing & ~kBuilding},
    {{"bestelle", "bestellst", "bestellt", "bestellen", "bestellt", "bestellen"}, "bestellen", "bestellt", "", "order", "orders", "ordered", "", kFood | kReadable},
    {{"packe", "packst", "packt", "packen", "packt", "packen"}, "packen", "gepackt", "", "pack", "packs", "packed", "", kOpenable},
    {{"fülle", "füllst", "füllt", "füllen", "füllt", "füllen"}, "füllen", "gefüllt", "", "fill", "fills", "filled", "", kOpenable},
    {{"leere", "leerst", "leert", "leeren", "leert", "leeren"}, "leeren", "geleert", "", "empty", "empties", "emptied", "", kOpenable},
    {{"zähle", "zählst", "zählt", "zählen", "zählt", "zählen"}, "zählen", "gezählt", "", "count", "counts", "counted", "", kAnimate | kThing},
    {{"teste", "testest", "testet", "testen", "testet", "testen"}, "testen", "getestet", "", "test", "tests", "tested", "", kObject | kTool | kVehicle | kInstrument},
    {{"rette", "rettest", "rettet", "retten", "rettet", "retten"}, "retten", "gerettet", "", "rescue", "rescues", "rescued", "", kAnimate},
    {{"begrüße", "begrüßt", "begrüßt", "begrüßen", "begrüßt", "begrüßen"}, "begrüßen", "begrüßt", "", "greet", "greets", "greeted", "", kPerson},
    {{"besitze", "besitzt", "besitzt", "besitzen", "besitzt", "besitzen"}, "besitzen", "besessen", "", "own", "owns", "owned", "", kThing},
    {{"erreiche", "erreichst", "erreicht", "erreichen", "erreicht", "erreichen"}, "erreichen", "erreicht", "", "reach", "reaches", "reached", "", kBuilding | kPerson},
    {{"fotografiere", "fotografierst", "fotografiert", "fotografieren", "fotografiert", "fotografieren"}, "fotografieren", "fotografiert", "", "photograph", "photographs", "photographed", "", kAnimate | kThing},
    {{"beobachte", "beobachtest", "beobachtet", "beobachten", "beobachtet", "beobachten"}, "beobachten", "beobachtet", "", "watch", "watches", "watched", "", kAnimate | kVehicle},
    {{"streichle", "streichelst", "streichelt", "streicheln", "streichelt", "streicheln"}, "streicheln", "gestreichelt", "", "stroke", "strokes", "stroked", "", kAnimal},
    {{"probiere", "probierst", "probiert", "probieren", "probiert", "probieren"}, "probieren", "probiert", "", "taste", "tastes", "tasted", "", kFood},
    {{"teile", "teilst", "teilt", "teilen", "teilt", "teilen"}, "teilen", "geteilt", "", "share", "shares", "shared", "", kFood | kObject | kReadable},
    {{"verstecke", "versteckst", "versteckt", "verstecken", "versteckt", "verstecken"}, "verstecken", "versteckt", "", "hide", "hides", "hid", "", kAnimate | kObject | kTool | kReadable | kClothing},
    {{"schicke", "schickst", "schickt", "schicken", "schickt", "schicken"}, "schicken", "geschickt", "", "send", "sends", "sent", "", kReadable | kOpenable},
    {{"wecke", "weckst", "weckt", "wecken", "weckt", "wecken"}, "wecken", "geweckt", "", "wake", "wakes", "woke", "", kAnimate},
    {{"störe", "störst", "stört", "stören", "stört", "stören"}, "stören", "gestört", "", "disturb", "disturbs", "disturbed", "", kAnimate},
    {{"umarme", "umarmst", "umarmt", "umarmen", "umarmt", "umarmen"}, "umarmen", "umarmt", "", "hug", "hugs", "hugged", "", kAnimate},
    {{"heirate", "heiratest", "heiratet", "heiraten", "heiratet", "heiraten"}, "heiraten", "geheiratet", "", "marry", "marries", "married", "", kPerson},
    {{"führe", "führst", "führt", "führen", "führt", "führen"}, "führen", "geführt", "", "lead", "leads", "led", "", kAnimate},
    {{"wiege", "wiegst", "wiegt", "wiegen", "wiegt", "wiegen"}, "wiegen", "gewogen", "", "weigh", "weighs", "weighed", "", kAnimal | kFood | kObject},
    {{"miete", "mietest", "mietet", "mieten", "mietet", "mieten"}, "mieten", "gemietet", "", "rent", "rents", "rented", "", kBuilding | kVehicle},
    {{"schneide", "schneidest", "schneidet", "schneiden", "schneidet", "schneiden"}, "schneiden", "geschnitten", "", "cut", "cuts", "cut", "", kFood | kPlant | kClothing},
    {{"backe", "backst", "backt", "backen", "backt", "backen"}, "backen", "gebacken", "", "bake", "bakes", "baked", "", kFood},
    {{"werfe", "wirfst", "wirft", "werfen", "werft", "werfen"}, "werfen", "geworfen", "", "throw", "throws", "threw", "", kObject | kTool | kFood},
    {{"halte", "hältst", "hält", "halten", "haltet", "halten"}, "halten", "gehalten", "", "hold", "holds", "held", "", kAnimate | (kThing & ~kBuilding)},
    {{"treffe", "triffst", "trifft", "treffen", "trefft", "treffen"}, "treffen", "getroffen", "", "meet", "meets", "met", "", kPerson},
    {{"verstehe", "verstehst", "versteht", "verstehen", "versteht", "verstehen"}, "verstehen", "verstanden", "", "understand", "understands", "understood", "", kPerson | kReadable},
    {{"beschreibe", "beschreibst", "beschreibt", "beschreiben", "beschreibt", "beschreiben"}, "beschreiben", "beschrieben", "", "describe", "describes", "described", "", kAnimate | kThing},
    {{"empfehle", "empfiehlst", "empfiehlt", "empfehlen", "empfehlt", "empfehlen"}, "empfehlen", "empfohlen", "", "recommend", "recommends", "recommended", "", kThing},
    {{"stehle", "stiehlst", "stiehlt", "stehlen", "stehlt", "stehlen"}, "stehlen", "gestohlen", "", "steal", "steals", "stole", "", kThing & ~kBuilding},
    {{"vermisse", "vermisst", "vermisst", "vermissen", "vermisst", "vermissen"}, "vermissen", "vermisst", "", "miss", "misses", "missed", "", kAnimate | kThing},
    {{"nehme", "nimmst", "nimmt", "nehmen", "nehmt", "nehmen"}, "mitnehmen", "mitgenommen", "mit", "take along", "takes along", "took along", "", kAnimate | (kThing & ~kBuilding)},
    {{"werfe", "wirfst", "wirft", "werfen", "werft", "werfen"}, "wegwerfen", "weggeworfen", "weg", "throw away", "throws away", "threw away", "", kObject | kFood | kReadable | kClothing},
    {{"ziehe", "ziehst", "zieht", "ziehen", "zieht", "ziehen"}, "ausziehen", "ausgezogen", "aus", "take off", "takes off", "took off", "", kClothing},
    {{"schalte", "schaltest", "schaltet", "schalten", "schaltet", "schalten"}, "ausschalten", "ausgeschaltet", "aus", "switch off", "switches off", "switched off", "", kObject},
    {{"bringe", "bringst", "bringt", "bringen", "bringt", "bringen"}, "zurückbringen", "zurückgebracht", "zurück", "bring back", "brings back", "brought back", "", kThing & ~kBuilding},
    {{"lese", "liest", "liest", "lesen", "lest", "lesen"}, "vorlesen", "vorgelesen", "vor", "read out", "reads out", "read out", "", kReadable},
    {{"lerne", "lernst", "lernt", "lernen", "lernt", "lernen"}, "kennenlernen", "kennengelernt", "kennen", "get to know", "gets to know", "got to know", "", kPerson},
    {{"esse", "isst", "isst", "essen", "esst", "essen"}, "aufessen", "aufgegessen", "auf", "eat up", "eats up", "ate up", "", kFood},
    {{"schreie", "schreist", "schreit", "schreien", "schreit", "schreien"}, "schreien", "geschrien", "", "shout", "shouts", "shouted", "", 0},
    {{"lächle", "lächelst", "lächelt", "lächeln", "lächelt", "lächeln"}, "lächeln", "gelächelt", "", "smile", "smiles", "smiled", "", 0},
    {{"huste", "hustest", "hustet", "husten", "hustet", "husten"}, "husten", "gehustet", "", "cough", "coughs", "coughed", "", 0},
    {{"träume", "träumst", "träumt", "träumen", "träumt", "träumen"}, "träumen", "geträumt", "", "dream", "dreams", "dreamt", "", 0},
    {{"flüstere", "flüsterst", "flüstert", "flüstern", "flüstert", "flüstern"}, "flüstern", "geflüstert", "", "whisper", "whispers", "whispered", "", 0},
    {{"pfeife", "pfeifst", "pfeift", "pfeifen", "pfeift", "pfeifen"}, "pfeifen", "gepfiffen", "", "whistle", "whistles", "whistled", "", 0},
    {{"frühstücke", "frühstückst", "frühstückt", "frühstücken", "frühstückt", "frühstücken"}, "frühstücken", "gefrühstückt", "", "have breakfast", "has breakfast", "had breakfast", "", 0},
    {{"höre", "hörst", "hört", "hören", "hört", "hören"}, "zuhören", "zugehört", "zu", "listen", "listens", "listened", "", 0},
    {{"passe", "passt", "passt", "passen", "passt", "passen"}, "aufpassen", "aufgepasst", "auf", "pay attention", "pays attention", "paid attention", "", 0},
    {{"spiele", "spielst", "spielt", "spielen", "spielt", "spielen"}, "mitspielen", "mitgespielt", "mit", "join in", "joins in", "joined in", "", 0},
    {{"denke", "denkst", "denkt", "denken", "denkt", "denken"}, "nachdenken", "nachgedacht", "nach", "think", "thinks", "thought", "", 0},
    {{"mache", "machst", "macht", "machen", "macht", "machen"}, "weitermachen", "weitergemacht", "weiter", "carry on", "carries on", "carried on", "", 0},
    {{"rufe", "rufst", "ruft", "rufen", "ruft", "rufen"}, "zurückrufen", "zurückgerufen", "zurück", "call back", "calls back", "called back", "", 0},
};
// clang-format on

struct Modal {
  std::array<const char*, 6> de;
  const char* en;            // "can"
  const char* en_3sg;        // "wants to"
  const char* en_other;      // "want to"
  const char* en_not_3sg;    // "does not want to"
  const char* en_not_other;  // "do not want to"
};
const Modal kHardModals[] = {
    {{"will", "willst", "will", "wollen", "wollt", "wollen"},
     "",
     "wants to",
     "want to",
     "does not want to",
     "do not want to"},
    {{"kann", "kannst", "kann", "können", "könnt", "können"}, "", "can", "can", "cannot", "cannot"},
    {{"muss", "musst", "muss", "müssen", "müsst", "müssen"}, "", "must", "must", "must not", "must not"},
    {{"darf", "darfst", "darf", "dürfen", "dürft", "dürfen"}, "", "may", "may", "may not", "may not"},
    {{"soll", "sollst", "soll", "sollen", "sollt", "sollen"}, "", "should", "should", "should not", "should not"},
};
const std::array<const char*, 6> kHaben = {"habe", "hast", "hat", "haben", "habt", "haben"};

const char* const kFrontAdverbs[][2] = {
    {"heute", "today"},  {"morgen", "tomorrow"},     {"gestern", "yesterday"},     {"jetzt", "now"},
    {"später", "later"}, {"manchmal", "sometimes"},  {"abends", "in the evening"}, {"morgens", "in the morning"},
    {"dann", "then"},    {"leider", "unfortunately"}};
const char* const kMidAdverbs[][2] = {{"oft", "often"}, {"immer", "always"}, {"selten", "rarely"},
                                      {"nie", "never"}, {"gern", "gladly"},  {"schnell", "quickly"}};
// ("dass" only follows verbs of saying and knowing: random_hard_pair's intro form.)
const char* const kSubordinators[][2] = {
    {"weil", "because"}, {"wenn", "when"}, {"obwohl", "although"}, {"bevor", "before"}, {"nachdem", "after"}};
const char* const kIntroVerbs[][2] = {{"weiß", "knows"},  {"sagt", "says"},  {"glaubt", "thinks"},
                                      {"hofft", "hopes"}, {"hört", "hears"}, {"merkt", "notices"}};
const char* const kCoordinators[][2] = {{"und", "and"}, {"aber", "but"}, {"oder", "or"}};

// ---- compound nouns: the long tail of the lexicon ----------------------------------------------

// German writes a compound as one word (apfel + kuchen -> apfelkuchen: gender and plural of the
// last part), English as two (apple cake). A fixed list of compounds (the same for every corpus
// seed) is drawn from modifiers x nouns; noun phrases pick them with Zipf frequencies (the
// r-th compound 1/sqrt(r) as often as the first), so a model sees the common ones often and the
// rare ones a handful of times, or never: a word-level model must learn every compound as a
// word of its own, the classic difficulty of German for machine translation.
constexpr double kCompoundShare = 0.5;

struct Modifier {
  const char* de;  // the combining form: küchen (küche), schul (schule), eier (ei)
  const char* en;
};
// clang-format off
const Modifier kModifiers[] = {
    {"haus", "house"},     {"garten", "garden"},    {"küchen", "kitchen"},   {"schul", "school"},
    {"wasser", "water"},   {"holz", "wood"},         {"stein", "stone"},       {"glas", "glass"},
    {"papier", "paper"},   {"leder", "leather"},     {"gold", "gold"},         {"eisen", "iron"},
    {"blumen", "flower"},  {"obst", "fruit"},        {"wein", "wine"},         {"milch", "milk"},
    {"kaffee", "coffee"},  {"tee", "tea"},           {"zucker", "sugar"},      {"schokoladen", "chocolate"},
    {"fisch", "fish"},     {"hunde", "dog"},         {"katzen", "cat"},        {"pferde", "horse"},
    {"vogel", "bird"},     {"sommer", "summer"},     {"winter", "winter"},     {"nacht", "night"},
    {"abend", "evening"},  {"feuer", "fire"},        {"regen", "rain"},        {"schnee", "snow"},
    {"sonnen", "sun"},     {"mond", "moon"},         {"stern", "star"},        {"berg", "mountain"},
    {"wald", "forest"},    {"see", "lake"},          {"meer", "sea"},          {"fluss", "river"},
    {"stadt", "town"},     {"dorf", "village"},      {"bauern", "farm"},       {"reise", "travel"},
    {"sport", "sports"},   {"musik", "music"},       {"spiel", "game"},        {"post", "post"},
    {"bahn", "railway"},   {"polizei", "police"},    {"hotel", "hotel"},       {"tisch", "table"},
    {"bett", "bed"},       {"fenster", "window"},    {"tür", "door"},          {"dach", "roof"},
    {"keller", "cellar"},  {"baum", "tree"},         {"rosen", "rose"},        {"kirsch", "cherry"},
    {"erdbeer", "strawberry"}, {"tomaten", "tomato"}, {"kartoffel", "potato"}, {"brot", "bread"},
    {"butter", "butter"},  {"honig", "honey"},       {"eier", "egg"},          {"woll", "wool"},
    {"seiden", "silk"},    {"baumwoll", "cotton"},   {"plastik", "plastic"},   {"kupfer", "copper"},
};
// clang-format on

struct CompoundLexicon {
  std::vector<std::string> strings;  // owns the text the Noun entries point into
  std::vector<Noun> nouns;           // most frequent first
  std::vector<double> cumulative;    // Zipf weights 1, 1/sqrt(2), 1/sqrt(3), ... summed
};

const CompoundLexicon& compounds() {
  static const CompoundLexicon lexicon = [] {
    constexpr int kPerHead = 20;                 // modifiers drawn for every noun
    std::mt19937_64 rng(0x636f6d706f756e64ULL);  // fixed: the same compounds for every corpus seed
    struct Parts {
      std::string de, de_plural, en, en_plural;
      char gender;
      unsigned kind;
    };
    std::vector<Parts> parts;
    for (const Noun& head : kHardNouns) {
      for (int k = 0; k < kPerHead; ++k) {
        const Modifier& m = kModifiers[rng() % std::size(kModifiers)];
        if (std::string(m.en) == head.en) continue;
        std::string de = std::string(m.de) + head.de;
        bool duplicate = false;
        for (const Parts& p : parts) duplicate = duplicate || p.de == de;
        if (duplicate) continue;
        parts.push_back({de, std::string(m.de) + head.de_plural, std::string(m.en) + " " + head.en,
                         std::string(m.en) + " " + head.en_plural, head.gender, head.kind});
      }
    }
    // A fixed shuffle decides which compounds are common (Fisher-Yates with integer draws).
    for (size_t i = parts.size(); i > 1; --i) std::swap(parts[i - 1], parts[rng() % i]);
    CompoundLexicon out;
    out.strings.reserve(parts.size() * 4);
    for (const Parts& p : parts)
      for (const std::string* text : {&p.de, &p.de_plural, &p.en, &p.en_plural}) out.strings.push_back(*text);
    double total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string* t = &out.strings[4 * i];
      out.nouns.push_back({parts[i].gender, t[0].c_str(), t[1].c_str(), t[2].c_str(), t[3].c_str(), parts[i].kind});
      total += 1.0 / std::sqrt(static_cast<double>(i + 1));  // sqrt: correctly rounded everywhere
      out.cumulative.push_back(total);
    }
    return out;
  }();
  return lexicon;
}

// A compound of one of `kinds` by Zipf frequency, or null when 20 draws found none of that kind.
const Noun* zipf_compound(std::mt19937_64& rng, unsigned kinds) {
  const CompoundLexicon& lexicon = compounds();
  for (int attempt = 0; attempt < 20; ++attempt) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * lexicon.cumulative.back();
    const size_t i = static_cast<size_t>(std::upper_bound(lexicon.cumulative.begin(), lexicon.cumulative.end(), u) -
                                         lexicon.cumulative.begin());
    const Noun& n = lexicon.nouns[std::min(i, lexicon.nouns.size() - 1)];
    if (n.kind & kinds) return &n;
  }
  return nullptr;
}

// ---- noun phrases -----------------------------------------------------------------------------

enum class Case { Nominative, Accusative, Dative };

// The declined adjective: weak after der/die/das, mixed after ein/kein, strong without an
// article (plural only here).
std::string adjective_form(const char* stem, char gender, Case c, bool plural, char article) {
  std::string s = stem;
  if (s == "hoch") s = "hoh";  // hoch -> hohe
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "el") == 0 && s != "hell") s = s.substr(0, s.size() - 2) + "l";
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "er") == 0 && (s == "teuer" || s == "sauber" || s == "bitter"))
    s = s.substr(0, s.size() - 2) + "r";
  if (s.back() == 'e') s.pop_back();       // müde -> müd + e
  if (c == Case::Dative) return s + "en";  // dem großen, einer kleinen, mit roten (every dative here)
  if (plural) return s + (article == 'd' || article == 'k' ? "en" : "e");
  if (article == 'd') return s + ((gender == 'm' && c == Case::Accusative) ? "en" : "e");
  // ein / kein: the ending shows the gender where the article does not.
  if (gender == 'm') return s + (c == Case::Accusative ? "en" : "er");
  if (gender == 'n') return s + "es";
  return s + "e";
}

std::string definite(char gender, Case c, bool plural) {
  if (c == Case::Dative) return plural ? "den" : gender == 'f' ? "der" : "dem";
  if (plural) return "die";
  if (gender == 'm') return c == Case::Accusative ? "den" : "der";
  return gender == 'f' ? "die" : "das";
}
std::string indefinite(char gender, Case c, bool negative) {
  const std::string stem = negative ? "kein" : "ein";
  if (c == Case::Dative) return stem + (gender == 'f' ? "er" : "em");
  if (gender == 'm') return stem + (c == Case::Accusative ? "en" : "");
  return stem + (gender == 'f' ? "e" : "");
}

bool starts_with_vowel_sound(const std::string& w) {
  return !w.empty() && (w[0] == 'a' || w[0] == 'e' || w[0] == 'i' || w[0] == 'o' || (w[0] == 'u' && w != "ugly"));
}

struct Phrase {
  std::string de, en;
  int person = 2;  // 0..5 as Verb::de; nouns: 2 (singular) or 5 (plural)
  char gender = 'm';
  bool plural = false;
  const Noun* noun = nullptr;
};

// Weak masculine nouns take -n / -en in the accusative singular (den studenten, einen bären).
std::string singular_form(const Noun& n, Case c) {
  static const char* const weak[][2] = {{"junge", "jungen"},        {"student", "studenten"}, {"soldat", "soldaten"},
                                        {"polizist", "polizisten"}, {"kunde", "kunden"},      {"bär", "bären"},
                                        {"hase", "hasen"},          {"nachbar", "nachbarn"},  {"bauer", "bauern"},
                                        {"pilot", "piloten"},       {"prinz", "prinzen"},     {"affe", "affen"},
                                        {"löwe", "löwen"},          {"riese", "riesen"},      {"hirte", "hirten"},
                                        {"matrose", "matrosen"},    {"elefant", "elefanten"}};
  // Compounds decline as their last part (den bauernjungen).
  const std::string word = n.de;
  if (c != Case::Nominative)
    for (const auto& w : weak) {
      const std::string singular = w[0];
      if (word.size() >= singular.size() && word.compare(word.size() - singular.size(), singular.size(), singular) == 0)
        return word.substr(0, word.size() - singular.size()) + w[1];
    }
  return word;
}

// The plural in case `c`: the dative plural adds -n unless the plural ends in -n or -s
// (den kindern, mit zwei hunden; den frauen, den autos).
std::string plural_form(const Noun& n, Case c) {
  std::string p = n.de_plural;
  if (c == Case::Dative && p.back() != 'n' && p.back() != 's') p += 'n';
  return p;
}

// A noun phrase of `kinds` in case `c`. `negative`: with kein / "no" (objects of a negated clause).
Phrase noun_phrase(std::mt19937_64& rng, unsigned kinds, Case c, bool allow_counted, bool negative = false) {
  // Half of the noun phrases name a compound (polizeihund, apfelkuchen).
  const Noun* compound = chance(rng, kCompoundShare) ? zipf_compound(rng, kinds) : nullptr;
  size_t i = 0;
  if (!compound) {
    do i = pick(rng, std::size(kHardNouns));
    while (!(kHardNouns[i].kind & kinds));
  }
  const Noun& n = compound ? *compound : kHardNouns[i];
  Phrase p;
  p.noun = &n;
  p.gender = n.gender;
  const bool adjective = chance(rng, 0.35);
  const Adjective& a = pick(rng, kAdjectives);
  const int form = negative ? 1 : static_cast<int>(pick(rng, allow_counted ? 4 : 3));
  if (form == 3) {  // counted plural, no article: strong adjective ending
    const int count = 2 + static_cast<int>(pick(rng, chance(rng, 0.5) ? 18 : 998));
    p.plural = true;
    p.person = 5;
    p.de =
        join({german_number(count), adjective ? adjective_form(a.de, n.gender, c, true, '-') : "", plural_form(n, c)});
    p.en = join({english_number(count), adjective ? a.en : "", n.en_plural});
    return p;
  }
  if (form == 2) {  // definite plural
    p.plural = true;
    p.person = 5;
    p.de = join({definite(n.gender, c, true), adjective ? adjective_form(a.de, n.gender, c, true, 'd') : "",
                 plural_form(n, c)});
    p.en = join({"the", adjective ? a.en : "", n.en_plural});
    return p;
  }
  if (form == 1) {  // indefinite singular (ein / kein)
    p.de = join({indefinite(n.gender, c, negative), adjective ? adjective_form(a.de, n.gender, c, false, 'e') : "",
                 singular_form(n, c)});
    const std::string head = adjective ? a.en : n.en;
    p.en = join({negative ? "no" : (starts_with_vowel_sound(head) ? "an" : "a"), adjective ? a.en : "", n.en});
    return p;
  }
  p.de = join({definite(n.gender, c, false), adjective ? adjective_form(a.de, n.gender, c, false, 'd') : "",
               singular_form(n, c)});
  p.en = join({"the", adjective ? a.en : "", n.en});
  return p;
}

// A prepositional phrase of place, company or purpose: the object in the dative (mit, in, an, auf,
// unter, neben, hinter, vor, von) or the accusative (für, ohne); "in dem" / "an dem" / "von dem"
// contract to im / am / vom as German writes them.
struct Preposition {
  const char* de;
  const char* en;
  Case object_case;
  unsigned kinds;
};
const Preposition kPrepositions[] = {
    {"mit", "with", Case::Dative, kAnimate | kTool | kInstrument},
    {"in", "in", Case::Dative, kBuilding | kVehicle},
    {"an", "at", Case::Dative, kBuilding},
    {"auf", "on", Case::Dative, kObject | kVehicle},
    {"unter", "under", Case::Dative, kPlant | kObject},
    {"neben", "next to", Case::Dative, kBuilding | kVehicle | kPlant | kObject},
    {"hinter", "behind", Case::Dative, kBuilding | kVehicle | kPlant},
    {"vor", "in front of", Case::Dative, kBuilding | kVehicle | kPlant},
    {"von", "from", Case::Dative, kPerson},
    {"für", "for", Case::Accusative, kAnimate},
    {"ohne", "without", Case::Accusative, kAnimate | kTool | kClothing},
};

Phrase prepositional_phrase(std::mt19937_64& rng) {
  const Preposition& prep = pick(rng, kPrepositions);
  Phrase object = noun_phrase(rng, prep.kinds, prep.object_case, false);
  const std::string de(prep.de);
  if (object.de.rfind("dem ", 0) == 0 && (de == "in" || de == "an" || de == "von")) {
    object.de = (de == "in" ? "im" : de == "an" ? "am" : "vom") + object.de.substr(3);
  } else {
    object.de = join({de, object.de});
  }
  object.en = join({prep.en, object.en});
  return object;
}

Phrase subject_phrase(std::mt19937_64& rng) {
  const size_t kind = pick(rng, 10);
  if (kind < 3) {
    static const char* const de[] = {"ich", "du", "er", "wir", "ihr", "sie"};
    static const char* const en[] = {"i", "you", "he", "we", "you", "they"};
    Phrase p;
    p.person = static_cast<int>(pick(rng, 6));
    p.de = de[p.person];
    p.en = en[p.person];
    if (p.person == 2 && chance(rng, 0.5)) {  // sie (she): 3rd singular
      p.de = "sie";
      p.en = "she";
    }
    return p;
  }
  if (kind < 5) {
    Phrase p;
    p.de = p.en = pick(rng, kNames);
    return p;
  }
  return noun_phrase(rng, kAnimate, Case::Nominative, true);
}

// ---- clauses -----------------------------------------------------------------------------------

// One clause in its three German orders and in English.
struct Clause {
  std::string de_main;      // subject verb ... (verb second)
  std::string de_inverted;  // verb subject ... (after a fronted adverb or clause)
  std::string de_final;     // subject ... verb (subordinate clause)
  std::string en;
};

std::string english_present(const Verb& v, int person) { return person == 2 ? v.en_3sg : v.en_base; }
const char* do_not(int person) { return person == 2 ? "does not" : "do not"; }

// A relative clause on `head` (the noun phrase it follows), as subject of the relative clause
// (der mann , der den hund sieht ,) or, for a transitive verb, as its object (der hund , den
// der mann sieht ,). Returns ", <clause> ," and the English ("who/that ...").
std::pair<std::string, std::string> relative_clause(std::mt19937_64& rng, const Phrase& head) {
  if (!head.noun) return {"", ""};
  const bool animate = head.noun->kind & kAnimate & kPerson;
  for (int attempt = 0; attempt < 20; ++attempt) {
    const Verb& v = pick(rng, kHardVerbs);
    if (v.objects == 0) {  // intransitive: the head is the subject
      const std::string fin = v.de[head.plural ? 5 : 2];
      return {join({",", definite(head.gender, Case::Nominative, head.plural), std::string(v.prefix) + fin, ","}),
              join({animate ? "who" : "that", head.plural ? v.en_base : v.en_3sg})};
    }
    if (chance(rng, 0.5)) {  // the head is the subject of the relative clause
      const Phrase o = noun_phrase(rng, v.objects, Case::Accusative, false);
      const std::string fin = v.de[head.plural ? 5 : 2];
      return {join({",", definite(head.gender, Case::Nominative, head.plural), o.de, std::string(v.prefix) + fin, ","}),
              join({animate ? "who" : "that", head.plural ? v.en_base : v.en_3sg, o.en})};
    }
    if (!(head.noun->kind & v.objects)) continue;  // the head must fit as the verb's object
    const Phrase s = subject_phrase(rng);
    if (s.de == "sie" || s.de == "ihr" || s.de == "du") continue;  // keep pronoun subjects simple here
    return {join({",", definite(head.gender, Case::Accusative, head.plural), s.de,
                  std::string(v.prefix) + v.de[s.person], ","}),
            join({"that", s.en, english_present(v, s.person)})};
  }
  return {"", ""};
}

Clause random_clause(std::mt19937_64& rng, bool allow_relative) {
  Phrase s = subject_phrase(rng);
  const Verb& v = pick(rng, kHardVerbs);
  const int kind = static_cast<int>(pick(rng, 7));  // 0-1 present, 2 negated, 3 modal, 4 perfect, 5 adverb, 6 kein
  const bool transitive = v.objects != 0;
  Phrase o;
  // Negated with nicht (kind 2, and modal / perfect clauses three times in ten): German negates an
  // indefinite object with kein instead (kind 6), so a nicht clause takes a definite or plural object.
  const bool negated = kind == 2 || ((kind == 3 || kind == 4) && chance(rng, 0.3));
  if (transitive) {
    o = noun_phrase(rng, v.objects, Case::Accusative, kind <= 1, kind == 6);
    for (int attempt = 0; negated && o.de.rfind("ein", 0) == 0 && attempt < 20; ++attempt)
      o = noun_phrase(rng, v.objects, Case::Accusative, false);
  }
  // A relative clause on the subject or the object (at most one per clause).
  std::string s_rel_de, s_rel_en, o_rel_de, o_rel_en;
  if (allow_relative && chance(rng, 0.35)) {
    if (transitive && chance(rng, 0.5) && o.noun && !o.plural) {
      std::tie(o_rel_de, o_rel_en) = relative_clause(rng, o);
    } else if (s.noun) {
      std::tie(s_rel_de, s_rel_en) = relative_clause(rng, s);
    }
  }
  // A prepositional phrase ends the middle field (before nicht and the verb parts) and the English
  // clause, unless an object relative clause already ends it.
  Phrase pp;
  if (o_rel_de.empty() && chance(rng, 0.3)) pp = prepositional_phrase(rng);
  const std::string sde = join({s.de, s_rel_de}), sen = join({s.en, s_rel_en});
  const std::string ode = join({o.de, o_rel_de, pp.de}), oen = join({o.en, o_rel_en, pp.en});
  // An object relative clause ends with a comma before whatever follows it in German.
  Clause c;
  const std::string fin = v.de[s.person];
  const std::string prefixed = std::string(v.prefix) + fin;
  switch (transitive ? kind : std::min(kind, 5)) {
    case 0:
    case 1:
    case 6:
      c.de_main = join({sde, fin, ode, v.prefix});
      c.de_inverted = join({fin, sde, ode, v.prefix});
      c.de_final = join({sde, ode, prefixed});
      c.en = join({sen, english_present(v, s.person), oen});
      break;
    case 2:
      c.de_main = join({sde, fin, ode, "nicht", v.prefix});
      c.de_inverted = join({fin, sde, ode, "nicht", v.prefix});
      c.de_final = join({sde, ode, "nicht", prefixed});
      c.en = join({sen, do_not(s.person), v.en_base, oen});
      break;
    case 3: {
      const Modal& m = pick(rng, kHardModals);
      const std::string mfin = m.de[s.person], nicht = negated ? "nicht" : "";
      c.de_main = join({sde, mfin, ode, nicht, v.infinitive});
      c.de_inverted = join({mfin, sde, ode, nicht, v.infinitive});
      c.de_final = join({sde, ode, nicht, v.infinitive, mfin});
      const char* en_modal =
          negated ? (s.person == 2 ? m.en_not_3sg : m.en_not_other) : (s.person == 2 ? m.en_3sg : m.en_other);
      c.en = join({sen, en_modal, v.en_base, oen});
      break;
    }
    case 4: {
      const std::string nicht = negated ? "nicht" : "", aux = kHaben[s.person];
      c.de_main = join({sde, aux, ode, nicht, v.participle});
      c.de_inverted = join({aux, sde, ode, nicht, v.participle});
      c.de_final = join({sde, ode, nicht, v.participle, aux});
      c.en = negated ? join({sen, "did not", v.en_base, oen}) : join({sen, v.en_past, oen});
      break;
    }
    default: {
      const auto& adverb = pick(rng, kMidAdverbs);
      c.de_main = join({sde, fin, adverb[0], ode, v.prefix});
      c.de_inverted = join({fin, sde, adverb[0], ode, v.prefix});
      c.de_final = join({sde, adverb[0], ode, prefixed});
      c.en = join({sen, adverb[1], english_present(v, s.person), oen});
      break;
    }
  }
  return c;
}

// Commas as German punctuates the joined clauses: none twice in a row, none first or last
// (a relative clause that ends a clause closes with the next comma or the sentence).
std::string tidy_commas(const std::string& text) {
  std::vector<std::string> kept;
  for (const std::string& token : split_tokens(text)) {
    if (token == "," && (kept.empty() || kept.back() == ",")) continue;
    kept.push_back(token);
  }
  while (!kept.empty() && kept.back() == ",") kept.pop_back();
  std::string out;
  for (const std::string& token : kept) out += (out.empty() ? "" : " ") + token;
  return out;
}

Pair sentence(const std::string& de, const std::string& en) { return {tidy_commas(de), tidy_commas(en)}; }

}  // namespace

HardLexiconSizes hard_lexicon_sizes() {
  return {std::size(kHardNouns), std::size(kAdjectives), std::size(kHardVerbs), std::size(kNames),
          compounds().nouns.size()};
}

Pair random_hard_pair(std::mt19937_64& rng) {
  const int form = static_cast<int>(pick(rng, 6));
  if (form == 0) {  // fronted adverb: verb second
    const auto& adverb = pick(rng, kFrontAdverbs);
    const Clause c = random_clause(rng, true);
    return sentence(join({adverb[0], c.de_inverted}), join({adverb[1], c.en}));
  }
  if (form == 1) {  // "<subject> weiß , dass ..." with the verb at the end
    const Phrase s = subject_phrase(rng);
    const auto& intro = pick(rng, kIntroVerbs);
    const Clause c = random_clause(rng, true);
    if (s.person != 2) return sentence(c.de_main, c.en);
    return sentence(join({s.de, intro[0], ",", "dass", c.de_final}), join({s.en, intro[1], "that", c.en}));
  }
  if (form == 2) {  // main clause , subordinator + verb-final clause
    const auto& sub = pick(rng, kSubordinators);
    const Clause a = random_clause(rng, true), b = random_clause(rng, false);
    return sentence(join({a.de_main, ",", sub[0], b.de_final}), join({a.en, sub[1], b.en}));
  }
  if (form == 3) {  // subordinate clause first: the main clause inverts
    const auto& sub = pick(rng, kSubordinators);
    const Clause a = random_clause(rng, false), b = random_clause(rng, true);
    return sentence(join({sub[0], a.de_final, ",", b.de_inverted}), join({sub[1], a.en, ",", b.en}));
  }
  if (form == 4) {  // coordination
    const auto& co = pick(rng, kCoordinators);
    const Clause a = random_clause(rng, true), b = random_clause(rng, false);
    return sentence(join({a.de_main, co[0] == std::string("und") ? "" : ",", co[0], b.de_main}),
                    join({a.en, co[1], b.en}));
  }
  const Clause c = random_clause(rng, true);
  return sentence(c.de_main, c.en);
}

}  // namespace translate
