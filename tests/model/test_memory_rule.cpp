// MemoryRule: the ten presets of issue 3, knob overrides, and clear errors that name the key.
#include <catch2/catch.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "memory_test_support.h"
#include "model/util/errors.h"
#include "support/user_error_text.h"

using namespace memscope::model;
using namespace memscope::test;

namespace {

// Every leaf of the rule's JSON as a dotted path and a TOML literal.
void leaves(const nlohmann::json& j, const std::string& path, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) leaves(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
  } else if (j.is_string()) {
    out.push_back(path + "=" + j.get<std::string>());
  } else {
    out.push_back(path + "=" + j.dump());
  }
}

}  // namespace

TEST_CASE("memory rule: the ten presets load with the axes of the issue table", "[model]") {
  // The ten memory presets, among the model presets (demo-mqar, …) that share the folder.
  const std::vector<std::string> shipped = list_presets();
  for (const char* name : {"atlas", "atlas-linear", "deltanet", "hebbian", "memora", "moneta", "omeganet",
                           "titans-lmm", "ttt-linear", "yaad"})
    CHECK(std::find(shipped.begin(), shipped.end(), name) != shipped.end());
  for (const auto& name : all_presets()) {
    MemoryRule r = load_memory_rule(name);
    INFO(name);
    CHECK(r.name == name);
    CHECK_FALSE(r.description.empty());
    CHECK(r.description.find('\n') == std::string::npos);
  }
  MemoryRule titans = load_memory_rule("titans-lmm");
  CHECK((titans.structure == Structure::Mlp && titans.bias == Bias::L2 && titans.window == 1 &&
         titans.optimiser == Optimiser::GdMomentum));
  MemoryRule atlas = load_memory_rule("atlas");
  CHECK((atlas.structure == Structure::Mlp && atlas.feature_map == FeatureMapKind::Poly && atlas.poly_degree == 2 &&
         atlas.window == 8 && atlas.optimiser == Optimiser::Muon));
  MemoryRule omega = load_memory_rule("omeganet");
  CHECK((omega.structure == Structure::Linear && omega.window == 8 && omega.optimiser == Optimiser::GdMomentum));
  MemoryRule al = load_memory_rule("atlas-linear");
  CHECK((al.structure == Structure::Linear && al.feature_map == FeatureMapKind::Identity && al.window == 8 &&
         al.optimiser == Optimiser::Muon));
  MemoryRule delta = load_memory_rule("deltanet");
  CHECK((delta.structure == Structure::Linear && delta.window == 1 && !delta.momentum_enabled));
  MemoryRule ttt = load_memory_rule("ttt-linear");
  CHECK((ttt.window == 1 && !ttt.momentum_enabled && ttt.retention == Retention::None && ttt.train_chunk == 16));
  CHECK(load_memory_rule("hebbian").bias == Bias::Dot);
  MemoryRule moneta = load_memory_rule("moneta");
  CHECK((moneta.bias == Bias::Lp && moneta.lp_p == 3.0 && moneta.retention == Retention::LqNormalize &&
         moneta.lq_q == 4.0));
  CHECK(load_memory_rule("yaad").bias == Bias::Huber);
  CHECK(load_memory_rule("memora").retention == Retention::Softmax);
}

TEST_CASE("memory rule: overrides use the TOML paths as knob names", "[model]") {
  MemoryRule r = load_memory_rule("atlas", {"memory.window.c=4", "memory.ns.coefficients=[1.5, -0.5, 0]",
                                            "memory.structure=linear", "memory.lr.max=0.5", "train.chunk=32",
                                            "memory.ns.per_step=[[3,-3,1],[2,-1,0]]", "memory.window.gamma=\"decay\""});
  CHECK(r.window == 4);
  CHECK(r.ns.coefficients == NsCoefficients{1.5, -0.5, 0.0});
  CHECK(r.ns.iterations() == 2);
  CHECK(r.structure == Structure::Linear);
  CHECK(r.max_lr == 0.5);
  CHECK(r.train_chunk == 32);
  CHECK(r.gamma == WindowWeights::Decay);
}

TEST_CASE("memory rule: to_json round-trips through the knob names", "[model]") {
  for (const auto& name : all_presets()) {
    MemoryRule r = load_memory_rule(name);
    nlohmann::json j = r.to_json();
    std::vector<std::string> knobs;
    leaves(j["memory"], "memory", knobs);
    leaves(j["train"], "train", knobs);
    // Setting every knob to its own value on a different preset reproduces this rule exactly.
    MemoryRule other = load_memory_rule(name == "deltanet" ? "hebbian" : "deltanet", knobs);
    other.name = r.name;
    other.description = r.description;
    INFO(name);
    CHECK(other.to_json() == j);
  }
}

TEST_CASE("memory rule: a malformed preset or knob is a clear error naming the key", "[model]") {
  struct Bad {
    std::vector<std::string> set;
    std::vector<std::string> expect;
  };
  for (const Bad& bad : std::vector<Bad>{
           {{"memory.windw.c=3"}, {"memory.windw", "unknown key"}},
           {{"memory.window.c=0"}, {"memory.window.c", "must be in [1, 4096], got 0"}},
           {{"memory.window.c=abc"}, {"memory.window.c", "integer"}},
           {{"memory.bias=l3"}, {"memory.bias", "l3", "l2, lp, huber, dot"}},
           {{"memory.feature_map.kind=tensor2"}, {"memory.structure", "d_v = d_phi"}},
           {{"memory.optimiser=sgd"}, {"memory.optimiser", "sgd", "gd-momentum, muon, dgd"}},
           {{"memory.retention=softmax"}, {"memory.retention", "linear"}},
           {{"memory.ns.coefficients=[1,2]"}, {"memory.ns.coefficients"}},
           {{"memory.conv=3"}, {"memory.conv", "true or false"}},
           {{"memory.window=4"}, {"memory.window", "table"}},
           {{"novalue"}, {"KEY=VALUE"}},
       }) {
    const std::string message = error_of([&] { load_memory_rule("atlas", bad.set); });
    INFO(bad.set.front() << " -> " << message);
    for (const auto& part : bad.expect) CHECK_THAT(message, Catch::Contains(part));
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK_THAT(error_of([] { load_memory_rule("no-such-preset"); }),
             Catch::Contains("unknown preset 'no-such-preset'") && Catch::Contains("atlas"));
  CHECK_THAT(error_of([] { parse_memory_rule("description = \"x\"\n[memory\nstructure = 1\n", "broken.toml"); }),
             Catch::Contains("broken.toml:2"));
  CHECK_THAT(error_of([] { parse_memory_rule("colour = \"red\"\n", "extra.toml"); }),
             Catch::Contains("extra.toml") && Catch::Contains("colour"));
  CHECK_THAT(error_of([] { parse_memory_rule("[memory]\nstructure = \"mlp\"\nretention = \"softmax\"\n", "x.toml"); }),
             Catch::Contains("memory.retention"));
  // dgd on MLP memory is the diagonal preconditioner (seed 004 change 2), not an error.
  CHECK(load_memory_rule("atlas", {"memory.optimiser=dgd"}).optimiser == Optimiser::Dgd);
  CHECK_THAT(error_of([] { load_memory_rule("/nonexistent/dir/rule.toml"); }), Catch::Contains("/nonexistent/dir/rule.toml"));
}
