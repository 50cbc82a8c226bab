// tests/test_json_read.cpp — the checked JSON readers (heed/json_read.h) and every reader of
// configurations and states built on them: out-of-range, fractional, negative, non-finite and
// mistyped values are heed::Error naming the op, the source and the key, never undefined
// behaviour (nlohmann's get<int64_t>() on 6.5e33 is UB) or a truncated value.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cstdint>
#include <limits>
#include <string>

#include "task.h"
#include "test_util.h"

using namespace heed;
using Json = nlohmann::json;

namespace {

const io::JsonPlace kPlace{"reader", "file.json", "key"};

}  // namespace

TEST_CASE("json_integer accepts in-range integers and rejects everything else by name") {
  CHECK(io::json_integer(Json(5), kPlace, 0, 10) == 5);
  CHECK(io::json_integer(Json(-5), kPlace) == -5);
  CHECK(io::json_integer(Json(std::numeric_limits<int64_t>::max()), kPlace) == std::numeric_limits<int64_t>::max());
  CHECK(io::json_integer(Json(std::numeric_limits<int64_t>::min()), kPlace) == std::numeric_limits<int64_t>::min());

  const std::string huge = error_message([] { io::json_integer(Json::parse("6.5e33"), kPlace, 1, 100); });
  CHECK(huge == "heed::reader: file.json: \"key\" is 6.5e+33, expected an integer in [1, 100]");
  // Fractional, float-spelled, too large for int64, below the minimum, and not numbers at all.
  for (const char* text : {"2.5", "64.0", "1e3", "18446744073709551615", "9223372036854775808", "-1", "\"7\"", "true",
                           "null", "[1]", "{}"}) {
    CAPTURE(text);
    const std::string message = error_message([&] { io::json_integer(Json::parse(text), kPlace, 0); });
    CHECK(contains(message, "heed::reader: file.json: \"key\" is "));
    CHECK(contains(message, "expected an integer in [0, 9223372036854775807]"));
  }
  CHECK(contains(error_message([] { io::json_integer(Json(11), kPlace, 0, 10); }),
                 "is 11, expected an integer in [0, 10]"));
}

TEST_CASE("json_unsigned covers the whole uint64 range and rejects negatives") {
  CHECK(io::json_unsigned(Json::parse("18446744073709551615"), kPlace) == std::numeric_limits<uint64_t>::max());
  CHECK(io::json_unsigned(Json(0), kPlace) == 0);
  CHECK(contains(error_message([] { io::json_unsigned(Json(-1), kPlace); }), "is -1, expected an integer in [0, "));
  CHECK(contains(error_message([] { io::json_unsigned(Json::parse("1e19"), kPlace); }), "is 1e+19"));
  CHECK(contains(error_message([] { io::json_unsigned(Json(9), kPlace, 8); }), "is 9, expected an integer in [0, 8]"));
}

TEST_CASE("json_number wants a finite number within bounds") {
  CHECK(io::json_number(Json(0.25), kPlace, 0.0, 1.0) == 0.25);
  CHECK(io::json_number(Json(3), kPlace) == 3.0);  // an integer is a number
  // The parser refuses literals too large for a double, but a document built in memory (or
  // edited by a program) can hold infinities and NaNs: they are not usable values.
  CHECK_THROWS(Json::parse("1e400"));
  const Json infinite = std::numeric_limits<double>::infinity();
  CHECK(contains(error_message([&] { io::json_number(infinite, kPlace); }), "expected a finite number"));
  CHECK(contains(error_message([] { io::json_number(Json(std::numeric_limits<double>::quiet_NaN()), kPlace); }),
                 "expected a finite number"));
  CHECK(contains(error_message([] { io::json_number(Json(1.5), kPlace, 0.0, 1.0); }),
                 "is 1.5, expected a finite number in [0, 1]"));
  CHECK(contains(error_message([] { io::json_number(Json("0.1"), kPlace); }), "is \"0.1\", expected a finite number"));
}

TEST_CASE("JsonFields names missing keys, nested paths and array elements") {
  const Json j = Json::parse(R"({"a": 1, "inner": {"b": "x", "list": [1, 2, "three"]}, "flag": true})");
  const io::JsonFields fields(j, "reader", "file.json");
  CHECK(fields.integer("a", 0, 5) == 1);
  CHECK(fields.boolean("flag"));
  CHECK(fields.object("inner").string("b") == "x");
  CHECK(error_message([&] { fields.integer("missing"); }) ==
        "heed::reader: file.json: \"missing\" is missing (the object has: a, flag, inner)");
  CHECK(error_message([&] { fields.object("inner").numbers("list"); }) ==
        "heed::reader: file.json: \"inner.list[2]\" is \"three\", expected a finite number");
  CHECK(contains(error_message([&] { fields.object("inner").integer("b"); }),
                 "\"inner.b\" is \"x\", expected an integer"));
  CHECK(contains(error_message([&] { fields.object("a"); }), "\"a\" is 1, expected a JSON object"));
  CHECK(contains(error_message([&] { fields.numbers("a"); }), "\"a\" is 1, expected an array"));
  CHECK(contains(error_message([&] { fields.object("inner").numbers("list", 0, 10, 2); }),
                 "expected an array of 2 numbers"));
  CHECK(contains(error_message([] { io::JsonFields(Json::array(), "reader", "file.json"); }),
                 "heed::reader: file.json: expected a JSON object, got []"));
  // Long values are cut short in messages.
  const Json long_value = std::string(500, 'x');
  CHECK(error_message([&] { io::json_integer(long_value, kPlace); }).size() < 200);
}

TEST_CASE("the translate model config: the fuzzers' reproducers are errors naming the key") {
  // Issue 16's two reproducers (nlohmann's get<int64_t>() made them undefined behaviour).
  const std::string huge_d_model = error_message([] {
    translate::ModelConfig::from_json(Json::parse(R"({"d_model": 6.5e33, "max_len": 16})"), "run.ckpt model");
  });
  CHECK(huge_d_model ==
        "heed::translate::ModelConfig: run.ckpt model: \"d_model\" is 6.5e+33, expected an integer in "
        "[1, 65536]");
  const std::string huge_heads = error_message(
      [] { translate::ModelConfig::from_json(Json::parse(R"({"d_model": 64, "heads": 4e20, "layers": 2})")); });
  CHECK(contains(huge_heads, "\"heads\" is 4e+20, expected an integer in [1, 1024]"));

  Json good = translate::ModelConfig{}.to_json();
  const translate::ModelConfig back = translate::ModelConfig::from_json(good);
  CHECK(back.d_model == 128);
  CHECK(back.heads == 4);
  CHECK(back.attn_scale == "sqrt_dk");
  good["heads"] = 3;  // 128 % 3 != 0
  CHECK(contains(error_message([&] { translate::ModelConfig::from_json(good); }),
                 "d_model 128 is not divisible by heads 3"));
  good["heads"] = 4;
  good["dropout"] = 1.5;
  CHECK(contains(error_message([&] { translate::ModelConfig::from_json(good); }), "\"dropout\" is 1.5"));
  good["dropout"] = 0.1;
  good["norm_first"] = 1;
  CHECK(contains(error_message([&] { translate::ModelConfig::from_json(good); }),
                 "\"norm_first\" is 1, expected true or false"));
}

TEST_CASE("the translate checkpoint configuration checks its vocabularies and corpus") {
  Json config = {{"model", translate::ModelConfig{}.to_json()},
                 {"source_vocab", {"<pad>", "<bos>", "<eos>", "<unk>", "hund"}},
                 {"target_vocab", {"<pad>", "<bos>", "<eos>", "<unk>", "dog"}},
                 {"corpus", {{"seed", 7}, {"train_size", 1000}, {"test_size", 10}}}};
  const translate::SavedConfig saved = translate::read_saved_config(config, "t.ckpt");
  CHECK(saved.source.size() == 5);
  CHECK(saved.corpus.seed == 7);
  CHECK(saved.corpus.train_size == 1000);

  config["corpus"]["train_size"] = 1e40;
  CHECK(contains(error_message([&] { translate::read_saved_config(config, "t.ckpt"); }),
                 "heed::translate: t.ckpt: \"corpus.train_size\" is 1e+40"));
  config["corpus"]["train_size"] = 1000;
  config["corpus"]["seed"] = -3;
  CHECK(contains(error_message([&] { translate::read_saved_config(config, "t.ckpt"); }), "\"corpus.seed\" is -3"));
  config["corpus"]["seed"] = 7;
  config["source_vocab"][4] = 5;
  CHECK(contains(error_message([&] { translate::read_saved_config(config, "t.ckpt"); }),
                 "\"source_vocab[4]\" is 5, expected a string"));
  CHECK(contains(error_message([] { translate::read_saved_config(Json::object(), "t.ckpt"); }),
                 "t.ckpt is not a translate checkpoint"));
}

TEST_CASE("scheduler, optimizer and loss-scaler states refuse out-of-range numbers by name") {
  Tensor w = zeros({2}, TensorOptions().requires_grad(true));
  optim::AdamW optimizer({w});
  optim::WarmupCosineLR scheduler(optimizer, 2, 10, 1e-4);

  Json state = scheduler.state_dict();
  state["step"] = 1.5e300;
  CHECK(
      contains(error_message([&] { scheduler.load_state_dict(state); }), "\"step\" is 1.5e+300, expected an integer"));
  state["step"] = 3;
  state["base_lrs"] = Json::array({std::numeric_limits<double>::infinity()});
  CHECK(contains(error_message([&] { scheduler.load_state_dict(state); }), "\"base_lrs[0]\" is"));

  optim::OptimizerState saved = optimizer.state_dict();
  saved.scalars["options"]["betas"] = {0.9, 2.0};
  CHECK(contains(error_message([&] { optimizer.load_state_dict(saved); }),
                 "\"options.betas[1]\" is 2.0, expected a finite number in [0, 1]"));

  amp::GradScaler scaler;
  Json scaler_state = scaler.state_dict();
  scaler_state["growth_interval"] = 1e30;
  CHECK(contains(error_message([&] { scaler.load_state_dict(scaler_state); }), "\"growth_interval\" is 1e+30"));
  scaler_state = scaler.state_dict();
  scaler_state["scale"] = std::numeric_limits<double>::quiet_NaN();
  CHECK(contains(error_message([&] { scaler.load_state_dict(scaler_state); }), "\"scale\" is"));
}
