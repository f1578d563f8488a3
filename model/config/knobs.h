// The knob registry (DESIGN principle 5, "Knobs, not code"): every tunable of a Preset, by its
// dotted name, with a type, a range, a one-line doc and whether it applies live or needs a restart.
// The preset loader, `memscope-cli knobs`, `--set`, the engine and the GUI all read this one list,
// so adding a hyperparameter means adding one entry in knobs.cpp and nothing else.
//
// Deliberately light (no torch, no toml++): the engine and the GUI include it.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace memscope::model {

struct Preset;

enum class KnobType {
  Int,              // TOML integer
  Float,            // TOML number (an integer literal is accepted)
  Bool,             // true | false
  Choice,           // one of `choices`, a TOML string
  String,           // any TOML string (a path)
  Coefficients,     // [a, b, c]
  CoefficientList,  // [[a, b, c], ...]
};

// Live knobs may change while the engine runs (the next step uses them); Restart knobs change the
// model's shape or its parameters' meaning, so a change rebuilds the model.
enum class KnobApply { Live, Restart };

using KnobTriple = std::array<double, 3>;
// One alternative per KnobType: Int → int64_t, Float → double, Bool → bool, Choice and String →
// std::string, Coefficients → KnobTriple, CoefficientList → std::vector<KnobTriple>.
using KnobValue = std::variant<int64_t, double, bool, std::string, KnobTriple, std::vector<KnobTriple>>;

struct Knob {
  std::string name;  // dotted, as in the preset TOML: "memory.window.c", "train.lr", "probe.every"
  KnobType type = KnobType::Int;
  double min = 0.0;  // Int/Float: inclusive range; ignored for other types
  double max = 0.0;
  std::vector<std::string> choices;  // Choice: the allowed strings, in display order
  std::string doc;                   // one line
  KnobApply apply = KnobApply::Restart;
  // Read and write the field on a Preset. `set` expects the alternative of `type` (a Float also
  // takes an int64_t) and does not range-check: callers check with knob_value_error first.
  std::function<KnobValue(const Preset&)> get;
  std::function<void(Preset&, const KnobValue&)> set;
};

// Every knob, sorted by name.
const std::vector<Knob>& knobs();

// The knob with this dotted name, or nullptr.
const Knob* find_knob(const std::string& name);

// true when `name` is a registered knob that applies live; false for restart knobs and unknown names.
bool knob_is_live(const std::string& name);

// "int", "float", "bool", "choice", "string", "coefficients", "coefficient-list".
const char* to_string(KnobType type);
// "live", "restart".
const char* to_string(KnobApply apply);

// The value as a TOML literal: 8, 0.5, true, "mag", [1.5, -0.5, 0.0], [[3.0, -3.0, 1.0]].
// Floats are written with enough digits to read back exactly.
std::string format_knob_value(const Knob& knob, const KnobValue& value);

// The value in a default-constructed Preset, formatted.
std::string knob_default(const Knob& knob);

// The preset's current value, formatted.
std::string knob_value(const Preset& preset, const Knob& knob);

// What a user may write: "[1, 4096]" for Int/Float, "linear | mlp" for Choice, "[a, b, c]" etc.
std::string knob_range(const Knob& knob);

// Empty when `value` has the knob's type and lies in its range (or choices); otherwise the reason,
// phrased to follow "<knob name>: ", e.g. "must be in [0, 10], got 20".
std::string knob_value_error(const Knob& knob, const KnobValue& value);

// Names of the knobs whose values differ between a and b, sorted.
std::vector<std::string> changed_knobs(const Preset& a, const Preset& b);

// The first knob that differs between a and b and needs a restart (changes the model's shape or
// its parameters' meaning); empty when b can be applied to a running model live.
std::string restart_knob_changed(const Preset& a, const Preset& b);

// The keys that may follow `table` in a dotted name, sorted: knob_keys("memory.window") gives
// {"c", "decay", "gamma"}, knob_keys("") the top-level tables {"detect", "engine", ...}.
std::vector<std::string> knob_keys(const std::string& table);

}  // namespace memscope::model
