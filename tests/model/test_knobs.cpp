// The knob registry (DESIGN principle 5): well-formed entries, coverage of the shipped presets,
// ranges enforced by the preset loader with errors that name the knob, live vs restart, and
// presets that round-trip through their resolved TOML.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model/config/knob_relevance.h"
#include "model/config/knobs.h"
#include "model/config/preset.h"
#include "model/util/errors.h"
#include "support/user_error_text.h"

using namespace memscope::model;
using memscope::test::error_of;

namespace {

// A preset built from defaults and overrides only.
Preset defaults_with(const std::vector<std::string>& sets) { return parse_preset("", "knobs-test.toml", sets); }

// The dotted keys a preset file writes: `[a.b]` headers prefix the `key = ...` lines under them.
// The shipped presets use no inline tables or multi-line values, which this relies on.
std::vector<std::string> keys_in_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::string> keys;
  std::string table;
  for (std::string line; std::getline(in, line);) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    line = line.substr(first);
    if (line[0] == '[') {
      const size_t open = line.find_first_not_of('[');  // `[[compare]]` is an array of tables
      table = line.substr(open, line.find(']') - open);
      continue;
    }
    std::string key = line.substr(0, line.find('='));
    key.erase(key.find_last_not_of(" \t") + 1);
    keys.push_back(table.empty() ? key : table + "." + key);
  }
  return keys;
}

std::string literal(const Knob& k, double v) {
  return k.type == KnobType::Int ? std::to_string(static_cast<int64_t>(v)) : format_knob_value(k, v);
}

}  // namespace

TEST_CASE("knobs: every entry has a unique name, a doc, a type that fits and a default in range", "[knobs]") {
  const auto& all = knobs();
  REQUIRE(all.size() > 50);
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    const Knob& k = all[i];
    INFO(k.name);
    CHECK(names.insert(k.name).second);
    if (i > 0) CHECK(all[i - 1].name < k.name);  // sorted
    CHECK(find_knob(k.name) == &k);
    CHECK(k.name.find('.') != std::string::npos);
    CHECK_FALSE(k.doc.empty());
    CHECK(k.doc.find('\n') == std::string::npos);
    REQUIRE(k.get);
    REQUIRE(k.set);
    const KnobValue d = k.get(Preset{});
    CHECK(knob_value_error(k, d).empty());
    CHECK_FALSE(knob_default(k).empty());
    if (k.type == KnobType::Int || k.type == KnobType::Float) CHECK(k.min < k.max);
    if (k.type == KnobType::Choice) CHECK(k.choices.size() >= 2);
  }
  CHECK(find_knob("train.lrr") == nullptr);
  CHECK(find_knob("memory.window") == nullptr);  // a table, not a knob
  CHECK(knob_keys("") == std::vector<std::string>{"detect", "engine", "memory", "model", "probe", "record", "task", "train"});
  CHECK(knob_keys("memory.window") == std::vector<std::string>{"c", "decay", "gamma"});
  CHECK(knob_default(*find_knob("memory.window.c")) == "1");
  CHECK(knob_default(*find_knob("train.lr")) == "0.003");
  CHECK(knob_default(*find_knob("model.block")) == "\"mag\"");
  CHECK(knob_default(*find_knob("memory.ns.coefficients")) == "[3.4445, -4.775, 2.0315]");
  CHECK(knob_default(*find_knob("memory.ns.per_step")) == "[]");
  CHECK(knob_default(*find_knob("engine.mode")) == "\"inspect\"");
  CHECK(knob_default(*find_knob("memory.lr.max")) == "1.0");
}

TEST_CASE("knobs: the fields the issue names are all registered", "[knobs]") {
  for (const char* name :
       {"memory.structure", "memory.bias", "memory.retention", "memory.optimiser", "memory.read", "memory.reset",
        "memory.conv", "memory.window.c", "memory.window.gamma", "memory.window.decay", "memory.feature_map.kind",
        "memory.feature_map.degree", "memory.feature_map.learnable", "memory.ns.steps", "memory.ns.coefficients",
        "memory.ns.per_step", "memory.lr.max", "memory.momentum.enabled", "memory.lp.p", "memory.lq.q",
        "memory.huber.delta", "model.block", "model.d_model", "model.ttl", "train.lr", "train.chunk", "train.seed",
        "task.kind", "task.text_path", "probe.every", "probe.matrices_every", "probe.downsample", "probe.full_matrices",
        "detect.spike_threshold", "detect.spike_half_life", "detect.spike_warmup", "detect.ns_error",
        "detect.norm_growth", "detect.lr_jump", "detect.loss_floor", "engine.mode", "engine.inspect_every", "engine.inspect_tokens", "engine.probe_seed",
        "engine.frame_budget_mb", "engine.keyframe_every", "engine.keyframe_budget_mb"}) {
    INFO(name);
    CHECK(find_knob(name) != nullptr);
  }
  CHECK(find_knob("engine.mode")->choices == std::vector<std::string>{"train", "inspect", "train+inspect"});
}

TEST_CASE("knobs: live are train (but the seed), probe, detect, engine, record and the memory's step-time knobs", "[knobs]") {
  const std::set<std::string> live_memory{"memory.lr.max",          "memory.ns.steps", "memory.ns.coefficients",
                                          "memory.ns.per_step",     "memory.window.decay", "memory.momentum.enabled",
                                          "memory.lp.p",            "memory.lq.q",     "memory.read",
                                          "memory.reset",           "memory.inner.normalize", "memory.inner.clip"};
  for (const Knob& k : knobs()) {
    const std::string table = k.name.substr(0, k.name.find('.'));
    const bool live = (table == "train" && k.name != "train.seed") || table == "probe" || table == "detect" ||
                      table == "engine" || table == "record" || live_memory.count(k.name);
    INFO(k.name);
    CHECK((k.apply == KnobApply::Live) == live);
    CHECK(knob_is_live(k.name) == live);
  }
  CHECK_FALSE(knob_is_live("no.such.knob"));
}

TEST_CASE("knobs: every key in every shipped preset is a registered knob", "[knobs]") {
  const std::set<std::string> root_keys{"description", "inherits", "compare.label", "compare.sets"};
  for (const auto& name : list_presets()) {
    const std::string file = std::string(MEMSCOPE_SOURCE_DIR) + "/assets/presets/" + name + ".toml";
    const auto keys = keys_in_file(file);
    CHECK_FALSE(keys.empty());
    for (const auto& key : keys) {
      INFO(file << ": " << key);
      CHECK((root_keys.count(key) || find_knob(key) != nullptr));
    }
  }
}

TEST_CASE("knobs: every shipped preset is its knob values (formatted values read back exactly)", "[knobs]") {
  for (const auto& name : list_presets()) {
    const Preset p = load_preset(name);
    // Every knob set to the preset's value, as `--set` literals on top of the defaults.
    std::vector<std::string> sets;
    for (const Knob& k : knobs()) sets.push_back(k.name + "=" + knob_value(p, k));
    const Preset rebuilt = defaults_with(sets);
    INFO(name);
    CHECK(changed_knobs(p, rebuilt).empty());
    CHECK(rebuilt.memory.train_chunk == p.train.chunk);
  }
}

TEST_CASE("knobs: every shipped preset round-trips through its resolved TOML", "[knobs]") {
  for (const auto& name : list_presets()) {
    const Preset p = load_preset(name);
    const Preset again = parse_preset(p.toml, name + ".toml");
    INFO(name);
    CHECK(again.name == p.name);
    CHECK(again.description == p.description);
    CHECK(changed_knobs(p, again).empty());
    for (const Knob& k : knobs()) CHECK(knob_value(again, k) == knob_value(p, k));
    CHECK(again.toml == p.toml);
  }
}

TEST_CASE("knobs: train.chunk sets the rule's preferred chunk and the trainer's", "[knobs]") {
  const Preset ttt = load_preset("ttt-linear");
  CHECK(ttt.train.chunk == 16);
  CHECK(ttt.memory.train_chunk == 16);
  const Preset set = load_preset("ttt-linear", {"train.chunk=8"});
  CHECK(set.train.chunk == 8);
  CHECK(set.memory.train_chunk == 8);
  const Preset d = defaults_with({});
  CHECK(d.train.chunk == d.memory.train_chunk);
}

TEST_CASE("knobs: every Int and Float knob accepts its min and max and rejects just outside", "[knobs]") {
  // Knobs whose extremes need a companion setting to pass a cross-field check of the loader.
  const std::map<std::string, std::vector<std::string>> companions{
      // model.memory_heads must divide model.d_model unless model.memory_head_dim is set.
      {"model.memory_heads", {"model.memory_head_dim=16"}},
      // model.attention_heads must divide model.d_model.
      {"model.attention_heads", {"model.d_model=256"}},
  };
  int checked = 0;
  for (const Knob& k : knobs()) {
    if (k.type != KnobType::Int && k.type != KnobType::Float) continue;
    std::vector<std::string> base;
    if (const auto it = companions.find(k.name); it != companions.end()) base = it->second;
    auto with = [&](const std::string& value) {
      std::vector<std::string> sets = base;
      sets.push_back(k.name + "=" + value);
      return sets;
    };
    for (double edge : {k.min, k.max}) {
      INFO(k.name << " = " << literal(k, edge));
      Preset p;
      CHECK_NOTHROW(p = defaults_with(with(literal(k, edge))));
      CHECK(knob_value(p, k) == format_knob_value(k, k.get(p)));
      if (k.type == KnobType::Int) CHECK(std::get<int64_t>(k.get(p)) == static_cast<int64_t>(edge));
      else CHECK(std::get<double>(k.get(p)) == edge);
    }
    // Integers step by one in int64 (2^62 + 1 is not a double); numbers by 1% (or 1e-9 below 0).
    const std::vector<std::string> outside =
        k.type == KnobType::Int
            ? std::vector<std::string>{std::to_string(static_cast<int64_t>(k.min) - 1),
                                       std::to_string(static_cast<int64_t>(k.max) + 1)}
            : std::vector<std::string>{literal(k, k.min == 0 ? -1e-9 : k.min - std::abs(k.min) * 0.01),
                                       literal(k, k.max + std::abs(k.max) * 0.01)};
    for (const auto& value : outside) {
      INFO(k.name << " = " << value);
      const std::string message = error_of([&] { defaults_with(with(value)); });
      CHECK_THAT(message, Catch::Contains(k.name + ": must be in ["));
    }
    ++checked;
  }
  CHECK(checked > 40);
}

TEST_CASE("knobs: type errors, bad choices and unknown knobs name the knob", "[knobs]") {
  CHECK_THAT(error_of([] { defaults_with({"train.lrr=1"}); }), Catch::Contains("train.lrr") &&
                                                                   Catch::Contains("unknown key") &&
                                                                   Catch::Contains("micro_batch, min_lr"));
  CHECK_THAT(error_of([] { defaults_with({"probe.every=often"}); }),
             Catch::Contains("probe.every: expected an integer, got a string"));
  CHECK_THAT(error_of([] { defaults_with({"detect.ns_error=true"}); }),
             Catch::Contains("detect.ns_error: expected a number, got a boolean"));
  CHECK_THAT(error_of([] { defaults_with({"engine.mode=replay"}); }),
             Catch::Contains("engine.mode: unknown value 'replay'") && Catch::Contains("train+inspect"));
  CHECK_THAT(error_of([] { defaults_with({"task.kind=poem"}); }), Catch::Contains("task.kind: unknown value 'poem'"));
  CHECK_THAT(error_of([] { defaults_with({"memory.ns.per_step=[[1,2,3],[1,2]]"}); }),
             Catch::Contains("memory.ns.per_step[1]"));
  CHECK_THAT(error_of([] { defaults_with({"probe=1"}); }), Catch::Contains("probe: expected a table"));
  CHECK_THAT(error_of([] { parse_preset("[engine]\nmode = \"train\"\nspeed = 2\n", "e.toml"); }),
             Catch::Contains("e.toml: engine.speed: unknown key") && Catch::Contains("keyframe_every"));
  CHECK_THAT(error_of([] { parse_preset("colour = 1\n", "c.toml"); }),
             Catch::Contains("c.toml: colour: unknown key") && Catch::Contains("description"));
  // Values land where the knob says.
  const Preset p = defaults_with({"engine.mode=train+inspect", "probe.full_matrices=true", "detect.spike_threshold=3",
                                  "memory.ns.per_step=[[3,-3,1],[2,-1,0]]", "task.text_path=/tmp/x.txt"});
  CHECK(p.engine.mode == EngineMode::TrainInspect);
  CHECK(p.probe.full_matrices);
  CHECK(p.detect.spike_threshold == 3.0);
  CHECK(p.memory.ns.per_step.size() == 2);
  CHECK(p.task.text_path == "/tmp/x.txt");
  CHECK(knob_value(p, *find_knob("task.text_path")) == "\"/tmp/x.txt\"");
}

TEST_CASE("knobs: changed_knobs lists exactly the knobs that differ", "[knobs]") {
  const Preset demo = load_preset("demo-mqar");
  CHECK(changed_knobs(demo, demo).empty());
  const Preset faster = load_preset("demo-mqar", {"train.lr=0.01"});
  CHECK(changed_knobs(demo, faster) == std::vector<std::string>{"train.lr"});
  CHECK(changed_knobs(faster, demo) == std::vector<std::string>{"train.lr"});
  const Preset two = load_preset("demo-mqar", {"memory.window.c=2", "engine.mode=train"});
  CHECK(changed_knobs(demo, two) == std::vector<std::string>{"engine.mode", "memory.window.c"});
  // Against the defaults: what demo-mqar (with atlas under it) sets, and nothing it leaves alone.
  const auto changed = changed_knobs(Preset{}, demo);
  const std::set<std::string> set(changed.begin(), changed.end());
  for (const char* name : {"memory.optimiser", "memory.window.c", "model.memory_heads", "task.keys", "train.steps"})
    CHECK(set.count(name));
  for (const char* name : {"model.d_model", "probe.every", "train.seed", "memory.structure"}) CHECK_FALSE(set.count(name));
}

TEST_CASE("knobs: format_knob_value writes TOML literals", "[knobs]") {
  const Knob& lr = *find_knob("train.lr");
  CHECK(format_knob_value(lr, 0.5) == "0.5");
  CHECK(format_knob_value(lr, 2.0) == "2.0");
  CHECK(format_knob_value(lr, 1e-8) == "1e-08");
  CHECK(format_knob_value(lr, 0.1 + 0.2) == "0.30000000000000004");  // exact, not rounded
  CHECK(format_knob_value(*find_knob("model.ttl"), true) == "true");
  CHECK(format_knob_value(*find_knob("task.text_path"), std::string("a\"b\\c")) == "\"a\\\"b\\\\c\"");
  CHECK(format_knob_value(*find_knob("memory.ns.per_step"), std::vector<KnobTriple>{{1, -2, 0.5}, {3, 0, 1}}) ==
        "[[1.0, -2.0, 0.5], [3.0, 0.0, 1.0]]");
  CHECK(knob_range(*find_knob("memory.window.c")) == "[1, 4096]");
  CHECK(knob_range(*find_knob("memory.structure")) == "linear | mlp");
  CHECK(knob_value_error(lr, 20.0) == "must be in [0, 10], got 20");
  CHECK(knob_range(*find_knob("memory.huber.delta")) == "[1e-4, 10000]");
  CHECK(knob_value_error(*find_knob("memory.lr.max"), 1e7) == "must be in [1e-6, 100], got 1e7");
  CHECK(knob_value_error(lr, int64_t{1}).empty());  // an integer literal is a number
  CHECK_FALSE(knob_value_error(lr, std::string("fast")).empty());
}

TEST_CASE("knobs: [[compare]] runs are read with their labels and sets, and bad ones name the entry", "[knobs]") {
  const Preset p = parse_preset("[[compare]]\nlabel = \"Omega\"\nsets = [\"memory.window.c=8\"]\n"
                                "[[compare]]\nsets = [\"memory.ns.steps=3\", \"train.lr=0.1\"]\n",
                                "cmp.toml");
  REQUIRE(p.compare.size() == 2);
  CHECK(p.compare[0].label == "Omega");
  CHECK(p.compare[0].sets == std::vector<std::string>{"memory.window.c=8"});
  CHECK(p.compare[1].label == "compare 2");
  CHECK(p.compare[1].sets.size() == 2);
  // The resolved TOML keeps them, so a checkpoint or session opens with the same comparison.
  CHECK(parse_preset(p.toml, "again.toml").compare.size() == 2);
  CHECK_THAT(error_of([] { parse_preset("[[compare]]\nsets = [\"memory.window.cc=8\"]\n", "c.toml"); }),
             Catch::Contains("c.toml: compare[0].sets: 'memory.window.cc=8' is not KEY=VALUE"));
  CHECK_THAT(error_of([] { parse_preset("[[compare]]\nlabel = 3\n", "c.toml"); }),
             Catch::Contains("compare[0].label: unknown key or wrong type"));
  CHECK_THAT(error_of([] { parse_preset("compare = 1\n", "c.toml"); }),
             Catch::Contains("compare: expected [[compare]] tables"));
}

TEST_CASE("knobs: a model's unused knobs say why, and every knob a model reads is kept", "[model]") {
  const auto reason = [](const Preset& p, const char* name) { return knob_unused_reason(*find_knob(name), p); };
  const Preset hope = load_preset("demo-mqar-hope");
  CHECK(reason(hope, "memory.lr.max").empty());  // the self-modifying memories' inner lr ceiling
  CHECK(reason(hope, "memory.inner.clip").empty());
  CHECK(reason(hope, "model.hope.conv").empty());
  CHECK(reason(hope, "model.cms.periods").empty());
  CHECK_FALSE(reason(hope, "memory.bias").empty());
  CHECK_FALSE(reason(hope, "model.window").empty());  // no attention in a hope block
  CHECK_FALSE(reason(hope, "model.ffn").empty());
  const Preset atlas = load_preset("demo-mqar");  // MAG with Atlas' Muon memory
  CHECK(reason(atlas, "memory.ns.steps").empty());
  CHECK(reason(atlas, "model.window").empty());
  CHECK_FALSE(reason(atlas, "memory.dgd.per_feature").empty());
  CHECK_FALSE(reason(atlas, "model.hope.conv").empty());
  CHECK_FALSE(reason(atlas, "model.segment").empty());
  // The train, task, probe, detect, engine and record knobs apply to every model.
  for (const Knob& k : knobs())
    if (k.name.rfind("memory.", 0) != 0 && k.name.rfind("model.", 0) != 0) CHECK(reason(hope, k.name.c_str()).empty());
}
