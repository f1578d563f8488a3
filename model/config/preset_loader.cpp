// TOML presets → Preset, every key read through the knob registry (knobs.h). The only translation
// unit that includes toml++ (build time).
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/config/knobs.h"
#include "model/config/preset.h"
#include "model/memory/continuum_memory.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

namespace fs = std::filesystem;

fs::path presets_dir() { return fs::path(MEMSCOPE_ASSETS_DIR) / "presets"; }

// Reads TOML values into knobs; every error names the source and the dotted knob.
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

  // Walks one table of the preset: knobs are read, sub-tables of the registry are walked, anything
  // else is an error. Unknown keys must fail: a typo in a knob must not silently fall back to a
  // default. `extra` are the non-knob keys allowed here (the root's description).
  void walk(const toml::table& t, const std::string& path, Preset& preset,
            const std::vector<std::string>& extra = {}) const {
    for (const auto& [k, node] : t) {
      const std::string key(k.str());
      if (std::find(extra.begin(), extra.end(), key) != extra.end()) continue;
      const std::string name = path.empty() ? key : path + "." + key;
      if (const Knob* knob = find_knob(name)) {
        const KnobValue value = read(node, *knob);
        const std::string why = knob_value_error(*knob, value);
        if (!why.empty()) fail(name, why);
        knob->set(preset, value);
      } else if (!knob_keys(name).empty()) {
        if (!node.is_table()) fail(name, "expected a table, got " + type_name(node));
        walk(*node.as_table(), name, preset);
      } else {
        std::vector<std::string> known = knob_keys(path);
        known.insert(known.end(), extra.begin(), extra.end());
        std::sort(known.begin(), known.end());
        std::string list;
        for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
        fail(name, "unknown key (known here: " + list + ")");
      }
    }
  }

 private:
  // The node as the knob's type; a type mismatch fails here, the range is checked by the caller.
  KnobValue read(const toml::node& n, const Knob& knob) const {
    const std::string& name = knob.name;
    switch (knob.type) {
      case KnobType::Int:
        if (!n.is_integer()) fail(name, "expected an integer, got " + type_name(n));
        return n.value<int64_t>().value();
      case KnobType::Float: {
        double v = 0.0;
        if (!number_of(n, v)) fail(name, "expected a number, got " + type_name(n));
        return v;
      }
      case KnobType::Bool:
        if (!n.is_boolean()) fail(name, "expected true or false, got " + type_name(n));
        return n.value<bool>().value();
      case KnobType::Choice:
        if (!n.is_string()) {
          std::string allowed;
          for (const auto& c : knob.choices) allowed += (allowed.empty() ? "" : ", ") + c;
          fail(name, "expected one of " + allowed + ", got " + type_name(n));
        }
        return n.value<std::string>().value();
      case KnobType::String:
        if (!n.is_string()) fail(name, "expected a string, got " + type_name(n));
        return n.value<std::string>().value();
      case KnobType::Coefficients: return triple(n, name);
      case KnobType::CoefficientList: {
        const toml::array* a = n.as_array();
        if (!a) fail(name, "expected an array of [a, b, c] triples, got " + type_name(n));
        std::vector<KnobTriple> list;
        for (size_t i = 0; i < a->size(); ++i) list.push_back(triple(*a->get(i), name + "[" + std::to_string(i) + "]"));
        return list;
      }
    }
    fail(name, "unsupported knob type");
  }

  static bool number_of(const toml::node& n, double& out) {
    if (n.is_integer()) out = static_cast<double>(n.value<int64_t>().value());
    else if (n.is_floating_point()) out = n.value<double>().value();
    else return false;
    return true;
  }

  KnobTriple triple(const toml::node& n, const std::string& key) const {
    const toml::array* a = n.as_array();
    if (!a || a->size() != 3) fail(key, "expected an array of 3 numbers [a, b, c]");
    KnobTriple out{};
    for (size_t i = 0; i < 3; ++i)
      if (!number_of(*a->get(i), out[i])) fail(key, "expected an array of 3 numbers [a, b, c]");
    return out;
  }

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

// `[[compare]]` tables: each a label and the knob overrides of one more run. A set must name a
// registered knob; its value is checked when the run is built, like any --set.
std::vector<CompareRun> read_compare(const toml::node& node, const Reader& r) {
  const toml::array* runs = node.as_array();
  if (!runs || !runs->is_array_of_tables())
    r.fail("compare", "expected [[compare]] tables, got " + Reader::type_name(node));
  std::vector<CompareRun> out;
  for (size_t i = 0; i < runs->size(); ++i) {
    const toml::table& t = *runs->get(i)->as_table();
    const std::string where = "compare[" + std::to_string(i) + "]";
    CompareRun run;
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      if (key == "label" && v.is_string()) {
        run.label = v.value<std::string>().value();
      } else if (key == "sets" && v.is_array()) {
        for (const auto& s : *v.as_array()) {
          if (!s.is_string()) r.fail(where + ".sets", "expected strings KEY=VALUE, got " + Reader::type_name(s));
          const std::string set = s.value<std::string>().value();
          const auto eq = set.find('=');
          if (eq == std::string::npos || !find_knob(set.substr(0, eq)))
            r.fail(where + ".sets", "'" + set + "' is not KEY=VALUE with a registered knob");
          run.sets.push_back(set);
        }
      } else {
        r.fail(where + "." + key, "unknown key or wrong type (known here: label = \"...\", sets = [\"KEY=VALUE\", ...])");
      }
    }
    if (run.label.empty()) run.label = "compare " + std::to_string(i + 1);
    out.push_back(std::move(run));
  }
  return out;
}

Preset read_preset(const toml::table& root, const std::string& origin, const std::string& name) {
  const Reader r(origin);
  Preset preset;
  preset.name = name;
  if (const toml::node* d = root.get("description")) {
    if (!d->is_string()) r.fail("description", "expected a string, got " + Reader::type_name(*d));
    preset.description = d->value<std::string>().value();
  }
  if (const toml::node* c = root.get("compare")) preset.compare = read_compare(*c, r);
  // Every table through the registry (knobs.h): the knob table is the one list of what a preset
  // may say. `inherits` is gone by now (resolve_inheritance).
  r.walk(root, "", preset, {"description", "compare"});

  preset.memory.name = name;
  preset.memory.description = preset.description;
  preset.memory.validate();
  // Cross-field checks the knob ranges cannot express.
  const LmConfig& m = preset.model;
  if (m.d_model % m.attention_heads != 0)
    r.fail("model.attention_heads", "must divide model.d_model (" + std::to_string(m.d_model) + "), got " +
                                        std::to_string(m.attention_heads));
  if (m.memory_head_dim == 0 && m.d_model % m.memory_heads != 0)
    r.fail("model.memory_heads", "must divide model.d_model (" + std::to_string(m.d_model) +
                                     ") unless model.memory_head_dim is set, got " + std::to_string(m.memory_heads));
  if (m.uses_cms()) {
    try {
      parse_cms_periods(m.cms_periods, "model.cms.periods");
    } catch (const UserError& e) {
      throw UserError(origin + ": " + e.what());
    }
    // HOPE's memories have no frozen form: their updates are the model (seed 004 change 4).
    if (!m.ttl) r.fail("model.ttl", "false is not supported with the continuum memory system (model.ffn = cms, model.block = hope)");
  }
  // task.* ranges per task are checked by make_task, which knows each task's constraints.
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
  // A relative path is relative to the file that names it, not to the current directory.
  std::string base_ref = base_name;
  if (is_path(base_name) && fs::path(base_name).is_relative() && fs::path(origin).has_parent_path())
    base_ref = (fs::path(origin).parent_path() / base_name).string();
  fs::path base_file;
  try {
    base_file = preset_file(base_ref);
  } catch (const UserError& e) {
    throw UserError(origin + ": inherits \"" + base_name + "\": " + e.what());
  }
  toml::table base = resolve_inheritance(parse_table(read_text(base_file), base_file.string()), base_file.string(),
                                         depth + 1);
  root.erase("inherits");
  merge_into(base, root);
  return base;
}

// The message of a preset error without its "ORIGIN: " prefix.
std::string without_origin(const UserError& e, const std::string& origin) {
  std::string message = e.what();
  if (message.rfind(origin + ": ", 0) == 0) message = message.substr(origin.size() + 2);
  return message;
}

// A preset that reads alone but not with `overrides`: the error names the --set that caused it
// (the one whose key the message starts with, else all of them), not the file.
[[noreturn]] void blame_overrides(const UserError& e, const std::string& origin, const std::vector<std::string>& overrides) {
  const std::string message = without_origin(e, origin);
  const std::string* culprit = nullptr;
  size_t best = 0;
  for (const auto& o : overrides) {
    // "memory.lr.max: expected …" for memory.lr.max=…, "foo: unknown key" for foo.bar=…
    for (std::string key = o.substr(0, o.find('=')); !key.empty();) {
      if (key.size() > best && message.rfind(key + ":", 0) == 0) {
        culprit = &o;
        best = key.size();
        break;
      }
      const size_t dot = key.rfind('.');
      key = dot == std::string::npos ? "" : key.substr(0, dot);
    }
  }
  std::string sets;
  for (const auto& o : overrides) sets += (sets.empty() ? "--set " : " --set ") + o;
  throw UserError((culprit ? "--set " + *culprit : sets) + " (on " + origin + "): " + message);
}

// Each [[compare]] run's sets are checked now, on the preset they modify, so that a bad value is
// reported at load and named by its run, not when the GUI builds that run.
void check_compare_runs(const toml::table& root, const Preset& preset, const std::string& origin, const std::string& name) {
  toml::table plain = root;
  plain.erase("compare");
  for (size_t i = 0; i < preset.compare.size(); ++i) {
    const std::string where = origin + ": compare[" + std::to_string(i) + "] (\"" + preset.compare[i].label + "\")";
    toml::table run = plain;
    try {
      for (const auto& set : preset.compare[i].sets) apply_override(run, set, origin);
      read_preset(run, origin, name);
    } catch (const UserError& e) {
      throw UserError(where + ": " + without_origin(e, origin));
    }
  }
}

Preset parse_with_name(const std::string& text, const std::string& origin, const std::string& name,
                       const std::vector<std::string>& overrides) {
  toml::table root = resolve_inheritance(parse_table(text, origin), origin, 0);
  Preset preset = read_preset(root, origin, name);  // the file alone: its errors name the file
  check_compare_runs(root, preset, origin, name);
  if (overrides.empty()) return preset;
  try {
    for (const auto& o : overrides) apply_override(root, o, origin);
    preset = read_preset(root, origin, name);
  } catch (const UserError& e) {
    blame_overrides(e, origin, overrides);
  }
  check_compare_runs(root, preset, origin, name);
  return preset;
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
