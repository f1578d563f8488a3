// MemoryRule: one test-time-learning memory as data (DESIGN principle 3). The four Miras axes
// (structure, attentional bias, retention, optimiser) plus the Omega window, the feature map φ,
// Newton–Schulz, the momentum reset policy and the read order. Presets are TOML files in
// assets/presets/ whose dotted paths are the knob names (`memory.window.c`).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "model/memory/ns_schedule.h"

namespace memscope::model {

enum class Structure { Linear, Mlp };                        // SPEC §3
enum class Bias { L2, Lp, Huber, Dot };                      // SPEC §4
enum class Retention { L2Decay, None, LqNormalize, Softmax };  // SPEC §5
enum class Optimiser { GdMomentum, Muon, Dgd };              // SPEC §5
enum class WindowWeights { Uniform, Decay, Gated };          // SPEC §4 γ
enum class FeatureMapKind { Identity, Poly, Tensor2 };       // SPEC §2
enum class ResetPolicy { Sequence, Batch, Never };           // SPEC §5 momentum reset
enum class ReadOrder { AfterWrite, BeforeWrite };            // y_t = M_t φ(q_t) or M_{t−1} φ(q_t)

struct MemoryRule {
  std::string name;         // preset name ("atlas"), or the file stem
  std::string description;  // one line for the GUI

  Structure structure = Structure::Linear;
  Bias bias = Bias::L2;
  Retention retention = Retention::L2Decay;
  Optimiser optimiser = Optimiser::GdMomentum;
  ReadOrder read = ReadOrder::AfterWrite;
  ResetPolicy reset = ResetPolicy::Sequence;
  bool conv = false;  // depthwise causal conv of width 4 after each projection (SPEC §2)

  int64_t window = 1;  // c, the Omega window (c = 1 is the delta rule)
  WindowWeights gamma = WindowWeights::Uniform;
  double gamma_decay = 0.95;  // d in `decay` weights d^{t−i}

  FeatureMapKind feature_map = FeatureMapKind::Identity;
  int64_t poly_degree = 2;
  bool poly_learnable = true;

  NsSchedule ns;  // used by the muon optimiser only

  double max_lr = 1.0;           // lr = max_lr · sigmoid(w·x + b)  (SPEC §1)
  bool momentum_enabled = true;  // false: β ≡ 0 (no momentum buffer, e.g. DeltaNet)
  double lp_p = 3.0;             // Moneta's p
  double lq_q = 4.0;             // Moneta's q (lq-normalize)
  double huber_delta = 1.0;      // initial δ_t of the Huber gate (δ_t = softplus(w·x + b))

  // dgd with per-feature gates (seed 004 change 3): α_t, η_t ∈ R^{d_φ} per head act on M's input
  // columns, M_t = M_{t−1} diag(α_t) − g_t diag(η_t); with the l2 bias and c = 1 this is
  // M_{t−1}(diag α_t − φ_t (η_t⊙φ_t)ᵀ) + v_t (η_t⊙φ_t)ᵀ. false: one α_t, η_t per head (SPEC §5).
  bool dgd_per_feature = false;
  // seed 004 change 6: the inner loss (and so g_t) is divided by its element count d_v.
  bool inner_normalize = false;
  // Inner gradient clipping: g_t ← g_t · min(1, clip/‖g_t‖_F), ‖·‖ over all memory weights of a
  // head (0 = off).
  double inner_clip = 0.0;

  int64_t train_chunk = 64;  // the preferred chunk size b for training (`train.chunk`)

  // Throws UserError naming the offending key when the rule is inconsistent.
  void validate() const;

  // d_φ for keys of dimension d (identity and poly keep d; tensor2 gives d + d²).
  int64_t feature_dim(int64_t key_dim) const;

  // The full rule with the TOML preset's structure (and knob names as paths).
  nlohmann::json to_json() const;
};

// Loads assets/presets/NAME.toml (a bare name) or a .toml file path, applies `key=value`
// overrides (dotted knob names; values are TOML literals, bare words are strings) and validates.
// Every problem is a UserError that names the key or the file.
MemoryRule load_memory_rule(const std::string& preset_or_path,
                            const std::vector<std::string>& overrides = {});

// Parses a rule from TOML text; `origin` names the source in error messages.
MemoryRule parse_memory_rule(const std::string& toml_text, const std::string& origin,
                             const std::vector<std::string>& overrides = {});

// Names of the presets shipped in assets/presets/, sorted.
std::vector<std::string> list_presets();

// The text name of each enum value, as written in presets.
const char* to_string(Structure v);
const char* to_string(Bias v);
const char* to_string(Retention v);
const char* to_string(Optimiser v);
const char* to_string(WindowWeights v);
const char* to_string(FeatureMapKind v);
const char* to_string(ResetPolicy v);
const char* to_string(ReadOrder v);

}  // namespace memscope::model
