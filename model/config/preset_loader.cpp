// TOML presets → Preset (memory rule, model, training, task). The only translation unit that
// includes toml++ (build time).
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "model/config/preset.h"
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

  // An integer knob that must lie in [lo, hi].
  void integer_in(const toml::table& t, const std::string& path, const char* key, int64_t& out, int64_t lo,
                  int64_t hi) const {
    integer(t, path, key, out);
    if (out < lo || out > hi)
      fail(join(path, key), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                std::to_string(out));
  }

  // A number knob that must lie in [lo, hi].
  void number_in(const toml::table& t, const std::string& path, const char* key, double& out, double lo,
                 double hi) const {
    number(t, path, key, out);
    if (!(out >= lo && out <= hi))
      fail(join(path, key), "must be in [" + format(lo) + ", " + format(hi) + "], got " + format(out));
  }

  static std::string format(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
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

MemoryRule read_memory(const Reader& r, const toml::table& root, const std::string& name) {
  MemoryRule rule;
  rule.name = name;
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
  if (const toml::table* t = r.table(root, "", "train")) r.integer(*t, "train", "chunk", rule.train_chunk);
  rule.validate();
  return rule;
}

LmConfig read_model(const Reader& r, const toml::table& root) {
  LmConfig m;
  const toml::table* t = r.table(root, "", "model");
  if (!t) return m;
  const std::string p = "model";
  r.allow_only(*t, p, {"block", "d_model", "layers", "memory_heads", "memory_head_dim", "attention_heads", "window",
                       "persistent", "segment", "ffn_mult", "rope_base", "ttl"});
  r.enumeration(*t, p, "block", m.block,
                std::array{BlockKind::Lmm, BlockKind::Mag, BlockKind::Mal, BlockKind::Mac, BlockKind::Swa});
  r.integer_in(*t, p, "d_model", m.d_model, 4, 8192);
  r.integer_in(*t, p, "layers", m.layers, 1, 256);
  r.integer_in(*t, p, "memory_heads", m.memory_heads, 1, 256);
  r.integer_in(*t, p, "memory_head_dim", m.memory_head_dim, 0, 4096);
  r.integer_in(*t, p, "attention_heads", m.attention_heads, 1, 256);
  r.integer_in(*t, p, "window", m.window, 1, 1 << 20);
  r.integer_in(*t, p, "persistent", m.persistent, 0, 4096);
  r.integer_in(*t, p, "segment", m.segment, 1, 1 << 20);
  r.number_in(*t, p, "ffn_mult", m.ffn_mult, 0.0, 64.0);
  r.number_in(*t, p, "rope_base", m.rope_base, 1.0, 1e9);
  r.boolean(*t, p, "ttl", m.ttl);
  if (m.d_model % m.attention_heads != 0)
    r.fail("model.attention_heads", "must divide model.d_model (" + std::to_string(m.d_model) + "), got " +
                                        std::to_string(m.attention_heads));
  if (m.memory_head_dim == 0 && m.d_model % m.memory_heads != 0)
    r.fail("model.memory_heads", "must divide model.d_model (" + std::to_string(m.d_model) +
                                     ") unless model.memory_head_dim is set, got " + std::to_string(m.memory_heads));
  return m;
}

TrainConfig read_train(const Reader& r, const toml::table& root, const MemoryRule& rule) {
  TrainConfig c;
  c.chunk = rule.train_chunk;
  const toml::table* t = r.table(root, "", "train");
  if (!t) return c;
  const std::string p = "train";
  r.allow_only(*t, p, {"steps", "batch", "lr", "min_lr", "warmup", "weight_decay", "beta1", "beta2", "eps", "clip",
                       "bptt", "chunk", "chunk_final", "final_fraction", "log_every", "eval_every", "eval_batches",
                       "seed"});
  r.integer_in(*t, p, "steps", c.steps, 0, int64_t{1} << 40);
  r.integer_in(*t, p, "batch", c.batch, 1, 1 << 16);
  r.number_in(*t, p, "lr", c.lr, 0.0, 10.0);
  r.number_in(*t, p, "min_lr", c.min_lr, 0.0, 1.0);
  r.integer_in(*t, p, "warmup", c.warmup, 0, int64_t{1} << 40);
  r.number_in(*t, p, "weight_decay", c.weight_decay, 0.0, 10.0);
  r.number_in(*t, p, "beta1", c.beta1, 0.0, 0.999999);
  r.number_in(*t, p, "beta2", c.beta2, 0.0, 0.999999);
  r.number_in(*t, p, "eps", c.eps, 1e-30, 1.0);
  r.number_in(*t, p, "clip", c.clip, 0.0, 1e9);
  r.integer_in(*t, p, "bptt", c.bptt, 0, 1 << 24);
  r.integer_in(*t, p, "chunk", c.chunk, 1, 1 << 20);
  r.integer_in(*t, p, "chunk_final", c.chunk_final, 0, 1 << 20);
  r.number_in(*t, p, "final_fraction", c.final_fraction, 0.0, 1.0);
  r.integer_in(*t, p, "log_every", c.log_every, 1, int64_t{1} << 40);
  r.integer_in(*t, p, "eval_every", c.eval_every, 0, int64_t{1} << 40);
  r.integer_in(*t, p, "eval_batches", c.eval_batches, 1, 1 << 20);
  int64_t seed = 0;
  r.integer_in(*t, p, "seed", seed, 0, std::numeric_limits<int64_t>::max());
  c.seed = static_cast<uint64_t>(seed);
  return c;
}

TaskConfig read_task(const Reader& r, const toml::table& root) {
  TaskConfig c;
  const toml::table* t = r.table(root, "", "task");
  if (!t) return c;
  const std::string p = "task";
  r.allow_only(*t, p, {"kind", "keys", "values", "pairs", "queries", "gap", "seq_len", "copy_tokens", "text_path"});
  r.string(*t, p, "kind", c.kind);
  r.integer(*t, p, "keys", c.keys);
  r.integer(*t, p, "values", c.values);
  r.integer(*t, p, "pairs", c.pairs);
  r.integer(*t, p, "queries", c.queries);
  r.integer(*t, p, "gap", c.gap);
  r.integer(*t, p, "seq_len", c.seq_len);
  r.integer(*t, p, "copy_tokens", c.copy_tokens);
  r.string(*t, p, "text_path", c.text_path);
  return c;  // ranges are checked by make_task, which knows each task's constraints
}

Preset read_preset(const toml::table& root, const std::string& origin, const std::string& name) {
  Reader r(origin);
  r.allow_only(root, "", {"description", "memory", "model", "train", "task"});
  Preset preset;
  preset.name = name;
  preset.memory = read_memory(r, root, name);
  preset.description = preset.memory.description;
  preset.model = read_model(r, root);
  preset.train = read_train(r, root, preset.memory);
  preset.task = read_task(r, root);
  std::ostringstream text;
  text << root;
  preset.toml = text.str();
  return preset;
}

toml::table parse_table(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw UserError(origin + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) + ": " +
                    std::string(e.description()));
  }
}

bool is_path(const std::string& preset_or_path) {
  return preset_or_path.find('/') != std::string::npos || fs::path(preset_or_path).extension() == ".toml";
}

fs::path preset_file(const std::string& preset_or_path) {
  const fs::path file = is_path(preset_or_path) ? fs::path(preset_or_path) : presets_dir() / (preset_or_path + ".toml");
  if (!fs::is_regular_file(file)) {
    if (is_path(preset_or_path)) throw UserError("preset file '" + file.string() + "' cannot be read");
    std::string known;
    for (const auto& n : list_presets()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown preset '" + preset_or_path + "' (known: " + known + ")");
  }
  return file;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError("preset file '" + file.string() + "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `over`'s values replace `base`'s, tables merge key by key.
void merge_into(toml::table& base, const toml::table& over) {
  for (const auto& [k, v] : over) {
    toml::node* existing = base.get(k.str());
    if (existing && existing->is_table() && v.is_table()) merge_into(*existing->as_table(), *v.as_table());
    else base.insert_or_assign(k.str(), v);
  }
}

// Resolves `inherits = "other"` chains: the base preset's tables first, this file's on top.
toml::table resolve_inheritance(toml::table root, const std::string& origin, int depth) {
  const toml::node* parent = root.get("inherits");
  if (!parent) return root;
  if (!parent->is_string()) throw UserError(origin + ": inherits: expected a preset name");
  if (depth > 8) throw UserError(origin + ": inherits: chain deeper than 8 (a cycle?)");
  const std::string base_name = parent->value<std::string>().value();
  const fs::path base_file = preset_file(base_name);
  toml::table base = resolve_inheritance(parse_table(read_text(base_file), base_file.string()), base_file.string(),
                                         depth + 1);
  root.erase("inherits");
  merge_into(base, root);
  return base;
}

Preset parse_with_name(const std::string& text, const std::string& origin, const std::string& name,
                       const std::vector<std::string>& overrides) {
  toml::table root = resolve_inheritance(parse_table(text, origin), origin, 0);
  for (const auto& o : overrides) apply_override(root, o, origin);
  return read_preset(root, origin, name);
}

}  // namespace

Preset parse_preset(const std::string& toml_text, const std::string& origin, const std::vector<std::string>& overrides) {
  return parse_with_name(toml_text, origin, fs::path(origin).stem().string(), overrides);
}

Preset load_preset(const std::string& preset_or_path, const std::vector<std::string>& overrides) {
  const fs::path file = preset_file(preset_or_path);
  return parse_with_name(read_text(file), file.string(), file.stem().string(), overrides);
}

MemoryRule parse_memory_rule(const std::string& toml_text, const std::string& origin,
                             const std::vector<std::string>& overrides) {
  return parse_preset(toml_text, origin, overrides).memory;
}

MemoryRule load_memory_rule(const std::string& preset_or_path, const std::vector<std::string>& overrides) {
  return load_preset(preset_or_path, overrides).memory;
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
