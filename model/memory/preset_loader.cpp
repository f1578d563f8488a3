// TOML presets → MemoryRule. The only translation unit that includes toml++ (build time).
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/memory/memory_rule.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

namespace fs = std::filesystem;

fs::path presets_dir() { return fs::path(MEMSCOPE_ASSETS_DIR) / "presets"; }

// Reads one TOML table into the rule; every error names the source and the dotted key.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw UserError(origin_ + ": " + key + ": " + why);
  }

  static std::string type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a number";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  }

  // Unknown keys are errors: a typo in a knob must not silently fall back to a default.
  void allow_only(const toml::table& t, const std::string& path, std::set<std::string> known) const {
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      if (!known.count(key)) {
        std::string list;
        for (const auto& name : known) list += (list.empty() ? "" : ", ") + name;
        fail(path.empty() ? key : path + "." + key, "unknown key (known here: " + list + ")");
      }
    }
  }

  const toml::table* table(const toml::table& t, const std::string& path, const char* key) const {
    const toml::node* n = t.get(key);
    if (!n) return nullptr;
    if (!n->is_table()) fail(join(path, key), "expected a table, got " + type_name(*n));
    return n->as_table();
  }

  template <typename Enum, size_t N>
  void enumeration(const toml::table& t, const std::string& path, const char* key, Enum& out,
                   const std::array<Enum, N>& values) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    std::string allowed;
    for (Enum v : values) allowed += (allowed.empty() ? "" : ", ") + std::string(to_string(v));
    if (!n->is_string()) fail(join(path, key), "expected one of " + allowed + ", got " + type_name(*n));
    const std::string s = n->value<std::string>().value();
    for (Enum v : values)
      if (s == to_string(v)) {
        out = v;
        return;
      }
    fail(join(path, key), "unknown value '" + s + "' (expected one of " + allowed + ")");
  }

  void integer(const toml::table& t, const std::string& path, const char* key, int64_t& out) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    if (!n->is_integer()) fail(join(path, key), "expected an integer, got " + type_name(*n));
    out = n->value<int64_t>().value();
  }

  void integer(const toml::table& t, const std::string& path, const char* key, int& out) const {
    int64_t v = out;
    integer(t, path, key, v);
    if (v < -1000000 || v > 1000000) fail(join(path, key), "out of range");
    out = static_cast<int>(v);
  }

  static bool number_of(const toml::node& n, double& out) {
    if (n.is_integer()) out = static_cast<double>(n.value<int64_t>().value());
    else if (n.is_floating_point()) out = n.value<double>().value();
    else return false;
    return true;
  }

  void number(const toml::table& t, const std::string& path, const char* key, double& out) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    if (!number_of(*n, out)) fail(join(path, key), "expected a number, got " + type_name(*n));
  }

  void boolean(const toml::table& t, const std::string& path, const char* key, bool& out) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    if (!n->is_boolean()) fail(join(path, key), "expected true or false, got " + type_name(*n));
    out = n->value<bool>().value();
  }

  void string(const toml::table& t, const std::string& path, const char* key, std::string& out) const {
    const toml::node* n = t.get(key);
    if (!n) return;
    if (!n->is_string()) fail(join(path, key), "expected a string, got " + type_name(*n));
    out = n->value<std::string>().value();
  }

  NsCoefficients triple(const toml::node& n, const std::string& key) const {
    const toml::array* a = n.as_array();
    if (!a || a->size() != 3) fail(key, "expected an array of 3 numbers [a, b, c]");
    NsCoefficients out{};
    for (size_t i = 0; i < 3; ++i)
      if (!number_of(*a->get(i), out[i])) fail(key, "expected an array of 3 numbers [a, b, c]");
    return out;
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

 private:
  std::string origin_;
};

// `--set a.b.c=value`: the value is a TOML literal (8, 0.5, true, [1, 2, 3], "x"); anything that
// does not parse as one is taken as a bare string, so `memory.structure=mlp` needs no quotes.
void apply_override(toml::table& root, const std::string& assignment, const std::string& origin) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UserError(origin + ": override '" + assignment + "' is not KEY=VALUE");
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);

  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string part; std::getline(in, part, '.');) {
    if (part.empty()) throw UserError(origin + ": override key '" + key + "' has an empty part");
    parts.push_back(part);
  }
  toml::table* t = &root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (path.empty() ? "" : ".") + parts[i];
    toml::node* n = t->get(parts[i]);
    if (!n) {
      t->insert_or_assign(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    if (!n->is_table()) throw UserError(origin + ": " + path + ": is a value, not a table (in override '" + assignment + "')");
    t = n->as_table();
  }
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{};
    parsed.insert_or_assign("v", value);
  }
  t->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
}

MemoryRule read_rule(const toml::table& root, const std::string& origin, const std::string& name) {
  Reader r(origin);
  MemoryRule rule;
  rule.name = name;
  r.allow_only(root, "", {"description", "memory", "train"});
  r.string(root, "", "description", rule.description);

  if (const toml::table* m = r.table(root, "", "memory")) {
    const std::string p = "memory";
    r.allow_only(*m, p, {"structure", "bias", "retention", "optimiser", "read", "reset", "conv", "window",
                         "feature_map", "ns", "lr", "momentum", "lp", "lq", "huber"});
    r.enumeration(*m, p, "structure", rule.structure, std::array{Structure::Linear, Structure::Mlp});
    r.enumeration(*m, p, "bias", rule.bias, std::array{Bias::L2, Bias::Lp, Bias::Huber, Bias::Dot});
    r.enumeration(*m, p, "retention", rule.retention,
                  std::array{Retention::L2Decay, Retention::None, Retention::LqNormalize, Retention::Softmax});
    r.enumeration(*m, p, "optimiser", rule.optimiser,
                  std::array{Optimiser::GdMomentum, Optimiser::Muon, Optimiser::Dgd});
    r.enumeration(*m, p, "read", rule.read, std::array{ReadOrder::AfterWrite, ReadOrder::BeforeWrite});
    r.enumeration(*m, p, "reset", rule.reset,
                  std::array{ResetPolicy::Sequence, ResetPolicy::Batch, ResetPolicy::Never});
    r.boolean(*m, p, "conv", rule.conv);

    if (const toml::table* w = r.table(*m, p, "window")) {
      r.allow_only(*w, "memory.window", {"c", "gamma", "decay"});
      r.integer(*w, "memory.window", "c", rule.window);
      r.enumeration(*w, "memory.window", "gamma", rule.gamma,
                    std::array{WindowWeights::Uniform, WindowWeights::Decay, WindowWeights::Gated});
      r.number(*w, "memory.window", "decay", rule.gamma_decay);
    }
    if (const toml::table* f = r.table(*m, p, "feature_map")) {
      r.allow_only(*f, "memory.feature_map", {"kind", "degree", "learnable"});
      r.enumeration(*f, "memory.feature_map", "kind", rule.feature_map,
                    std::array{FeatureMapKind::Identity, FeatureMapKind::Poly, FeatureMapKind::Tensor2});
      r.integer(*f, "memory.feature_map", "degree", rule.poly_degree);
      r.boolean(*f, "memory.feature_map", "learnable", rule.poly_learnable);
    }
    if (const toml::table* ns = r.table(*m, p, "ns")) {
      r.allow_only(*ns, "memory.ns", {"steps", "coefficients", "per_step"});
      r.integer(*ns, "memory.ns", "steps", rule.ns.steps);
      if (const toml::node* c = ns->get("coefficients"))
        rule.ns.coefficients = r.triple(*c, "memory.ns.coefficients");
      if (const toml::node* list = ns->get("per_step")) {
        const toml::array* a = list->as_array();
        if (!a) r.fail("memory.ns.per_step", "expected an array of [a, b, c] triples");
        rule.ns.per_step.clear();
        for (size_t i = 0; i < a->size(); ++i)
          rule.ns.per_step.push_back(r.triple(*a->get(i), "memory.ns.per_step[" + std::to_string(i) + "]"));
      }
    }
    if (const toml::table* t = r.table(*m, p, "lr")) {
      r.allow_only(*t, "memory.lr", {"max"});
      r.number(*t, "memory.lr", "max", rule.max_lr);
    }
    if (const toml::table* t = r.table(*m, p, "momentum")) {
      r.allow_only(*t, "memory.momentum", {"enabled"});
      r.boolean(*t, "memory.momentum", "enabled", rule.momentum_enabled);
    }
    if (const toml::table* t = r.table(*m, p, "lp")) {
      r.allow_only(*t, "memory.lp", {"p"});
      r.number(*t, "memory.lp", "p", rule.lp_p);
    }
    if (const toml::table* t = r.table(*m, p, "lq")) {
      r.allow_only(*t, "memory.lq", {"q"});
      r.number(*t, "memory.lq", "q", rule.lq_q);
    }
    if (const toml::table* t = r.table(*m, p, "huber")) {
      r.allow_only(*t, "memory.huber", {"delta"});
      r.number(*t, "memory.huber", "delta", rule.huber_delta);
    }
  }
  if (const toml::table* t = r.table(root, "", "train")) {
    r.allow_only(*t, "train", {"chunk"});
    r.integer(*t, "train", "chunk", rule.train_chunk);
  }
  rule.validate();
  return rule;
}

MemoryRule parse_with_name(const std::string& text, const std::string& origin, const std::string& name,
                           const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw UserError(origin + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                    ": " + std::string(e.description()));
  }
  for (const auto& o : overrides) apply_override(root, o, origin);
  return read_rule(root, origin, name);
}

}  // namespace

MemoryRule parse_memory_rule(const std::string& toml_text, const std::string& origin,
                             const std::vector<std::string>& overrides) {
  return parse_with_name(toml_text, origin, fs::path(origin).stem().string(), overrides);
}

MemoryRule load_memory_rule(const std::string& preset_or_path, const std::vector<std::string>& overrides) {
  const bool is_path = preset_or_path.find('/') != std::string::npos ||
                       fs::path(preset_or_path).extension() == ".toml";
  const fs::path file = is_path ? fs::path(preset_or_path) : presets_dir() / (preset_or_path + ".toml");
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (is_path) throw UserError("memory rule file '" + file.string() + "' cannot be read");
    std::string known;
    for (const auto& n : list_presets()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown preset '" + preset_or_path + "' (known: " + known + ")");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_with_name(text.str(), file.string(), file.stem().string(), overrides);
}

std::vector<std::string> list_presets() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(presets_dir(), ec))
    if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace memscope::model
