// The knob table: one entry per Preset field (DESIGN principle 5). Ranges are bounds against typos
// and nonsense, wide enough for every shipped preset and every experiment in the README; the
// cross-field rules (MemoryRule::validate, model head counts, make_task) stay where they are.
#include "model/config/knobs.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <type_traits>

#include "model/config/preset.h"
#include "model/data/task.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

// A field of a Preset as a lambda that works on both `Preset&` and `const Preset&`, so one
// expression gives both the getter and the setter.
#define KNOB_FIELD(expr) [](auto& p) -> auto& { return expr; }

constexpr double kMany = static_cast<double>(int64_t{1} << 40);  // "unbounded" step counts
constexpr double kSeedMax = static_cast<double>(int64_t{1} << 62);  // exact as a double and as an int64

double as_double(const KnobValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}

Knob make(const char* name, KnobType type, KnobApply apply, const char* doc) {
  Knob k;
  k.name = name;
  k.type = type;
  k.apply = apply;
  k.doc = doc;
  return k;
}

template <typename Field>
Knob int_knob(const char* name, double lo, double hi, KnobApply apply, const char* doc, Field field) {
  Knob k = make(name, KnobType::Int, apply, doc);
  k.min = lo;
  k.max = hi;
  k.get = [field](const Preset& p) -> KnobValue { return static_cast<int64_t>(field(p)); };
  k.set = [field](Preset& p, const KnobValue& v) {
    auto& f = field(p);
    f = static_cast<std::remove_reference_t<decltype(f)>>(std::get<int64_t>(v));
  };
  return k;
}

template <typename Field>
Knob float_knob(const char* name, double lo, double hi, KnobApply apply, const char* doc, Field field) {
  Knob k = make(name, KnobType::Float, apply, doc);
  k.min = lo;
  k.max = hi;
  k.get = [field](const Preset& p) -> KnobValue { return static_cast<double>(field(p)); };
  k.set = [field](Preset& p, const KnobValue& v) { field(p) = as_double(v); };
  return k;
}

template <typename Field>
Knob bool_knob(const char* name, KnobApply apply, const char* doc, Field field) {
  Knob k = make(name, KnobType::Bool, apply, doc);
  k.get = [field](const Preset& p) -> KnobValue { return static_cast<bool>(field(p)); };
  k.set = [field](Preset& p, const KnobValue& v) { field(p) = std::get<bool>(v); };
  return k;
}

// A Choice over an enum: the choices are the enum's to_string names, in `values` order.
template <typename Enum, size_t N, typename Field>
Knob enum_knob(const char* name, const std::array<Enum, N>& values, KnobApply apply, const char* doc, Field field) {
  Knob k = make(name, KnobType::Choice, apply, doc);
  for (Enum e : values) k.choices.emplace_back(to_string(e));
  k.get = [field](const Preset& p) -> KnobValue { return std::string(to_string(field(p))); };
  k.set = [field, values, knob = k.name](Preset& p, const KnobValue& v) {
    const auto& s = std::get<std::string>(v);
    for (Enum e : values)
      if (s == to_string(e)) {
        field(p) = e;
        return;
      }
    throw UserError(knob + ": unknown value '" + s + "'");
  };
  return k;
}

// A Choice stored as a string (task.kind, whose factory is make_task).
template <typename Field>
Knob string_choice_knob(const char* name, std::vector<std::string> choices, KnobApply apply, const char* doc,
                        Field field) {
  Knob k = make(name, KnobType::Choice, apply, doc);
  k.choices = std::move(choices);
  k.get = [field](const Preset& p) -> KnobValue { return std::string(field(p)); };
  k.set = [field](Preset& p, const KnobValue& v) { field(p) = std::get<std::string>(v); };
  return k;
}

template <typename Field>
Knob string_knob(const char* name, KnobApply apply, const char* doc, Field field) {
  Knob k = make(name, KnobType::String, apply, doc);
  k.get = [field](const Preset& p) -> KnobValue { return std::string(field(p)); };
  k.set = [field](Preset& p, const KnobValue& v) { field(p) = std::get<std::string>(v); };
  return k;
}

constexpr KnobApply Live = KnobApply::Live;
constexpr KnobApply Restart = KnobApply::Restart;

std::vector<Knob> memory_knobs() {
  std::vector<Knob> k;
  // The four Miras axes and the shape of the memory: a change means different parameters.
  k.push_back(enum_knob("memory.structure", std::array{Structure::Linear, Structure::Mlp}, Restart,
                        "memory M: a matrix, or the residual 2-layer MLP of Titans/Atlas (SPEC §3)",
                        KNOB_FIELD(p.memory.structure)));
  k.push_back(enum_knob("memory.bias", std::array{Bias::L2, Bias::Lp, Bias::Huber, Bias::Dot}, Restart,
                        "attentional bias: the inner loss l(M(phi(k)), v) (SPEC §4)", KNOB_FIELD(p.memory.bias)));
  k.push_back(enum_knob("memory.retention",
                        std::array{Retention::L2Decay, Retention::None, Retention::LqNormalize, Retention::Softmax},
                        Restart, "how the old memory is kept: retain*M, all of it, Moneta's lq-normalize, or softmax (SPEC §5)",
                        KNOB_FIELD(p.memory.retention)));
  k.push_back(enum_knob("memory.optimiser", std::array{Optimiser::GdMomentum, Optimiser::Muon, Optimiser::Dgd},
                        Restart, "update form: Titans' gd with momentum, Atlas' Muon, or delta gradient descent (SPEC §5)",
                        KNOB_FIELD(p.memory.optimiser)));
  k.push_back(enum_knob("memory.read", std::array{ReadOrder::AfterWrite, ReadOrder::BeforeWrite}, Live,
                        "read y_t from M_t (after this token's write) or from M_{t-1}", KNOB_FIELD(p.memory.read)));
  k.push_back(enum_knob("memory.reset", std::array{ResetPolicy::Sequence, ResetPolicy::Batch, ResetPolicy::Never},
                        Live, "when the momentum buffer S restarts at zero (SPEC §5)", KNOB_FIELD(p.memory.reset)));
  k.push_back(bool_knob("memory.conv", Restart, "depthwise causal convolution of width 4 after each projection (SPEC §2)",
                        KNOB_FIELD(p.memory.conv)));

  k.push_back(int_knob("memory.window.c", 1, 4096, Restart, "Omega window c: tokens in the inner loss (1 = delta rule, SPEC §4)",
                       KNOB_FIELD(p.memory.window)));
  k.push_back(enum_knob("memory.window.gamma", std::array{WindowWeights::Uniform, WindowWeights::Decay, WindowWeights::Gated},
                        Restart, "gamma, the weights inside the window: 1/c, decay^(t-i), or a per-token gate (SPEC §4)",
                        KNOB_FIELD(p.memory.gamma)));
  // validate() wants (0, 1]; 0.001 is the smallest d that still reaches a second token in practice.
  k.push_back(float_knob("memory.window.decay", 0.001, 1.0, Live, "d of the decay window weights d^(t-i) (SPEC §4)",
                         KNOB_FIELD(p.memory.gamma_decay)));

  k.push_back(enum_knob("memory.feature_map.kind",
                        std::array{FeatureMapKind::Identity, FeatureMapKind::Poly, FeatureMapKind::Tensor2}, Restart,
                        "feature map phi on keys and queries: identity, polynomial, or [x, vec(xx^T)/sqrt2] (SPEC §2)",
                        KNOB_FIELD(p.memory.feature_map)));
  k.push_back(int_knob("memory.feature_map.degree", 1, 8, Restart, "degree p of the polynomial feature map (SPEC §2)",
                       KNOB_FIELD(p.memory.poly_degree)));
  k.push_back(bool_knob("memory.feature_map.learnable", Restart,
                        "polynomial coefficients a_i are outer parameters (false: fixed at 1/i!)",
                        KNOB_FIELD(p.memory.poly_learnable)));

  // Newton–Schulz: iteration counts validate() allows (1..20).
  k.push_back(int_knob("memory.ns.steps", 1, 20, Live, "Newton-Schulz iterations k of the muon optimiser (SPEC §6)",
                       KNOB_FIELD(p.memory.ns.steps)));
  {
    Knob c = make("memory.ns.coefficients", KnobType::Coefficients, Live,
                  "the quintic [a, b, c] of every Newton-Schulz step (Muon's by default, SPEC §6)");
    c.get = [](const Preset& p) -> KnobValue { return p.memory.ns.coefficients; };
    c.set = [](Preset& p, const KnobValue& v) { p.memory.ns.coefficients = std::get<KnobTriple>(v); };
    k.push_back(std::move(c));
  }
  {
    Knob c = make("memory.ns.per_step", KnobType::CoefficientList, Live,
                  "one [a, b, c] per Newton-Schulz step; when non-empty it replaces steps and coefficients");
    c.get = [](const Preset& p) -> KnobValue { return p.memory.ns.per_step; };
    c.set = [](Preset& p, const KnobValue& v) { p.memory.ns.per_step = std::get<std::vector<KnobTriple>>(v); };
    k.push_back(std::move(c));
  }

  k.push_back(float_knob("memory.lr.max", 1e-6, 100.0, Live, "max_lr: the inner lr gate is max_lr * sigmoid(w.x + b) (SPEC §1)",
                         KNOB_FIELD(p.memory.max_lr)));
  k.push_back(bool_knob("memory.momentum.enabled", Live, "false: momentum is 0, no surprise buffer (DeltaNet, TTT)",
                        KNOB_FIELD(p.memory.momentum_enabled)));
  k.push_back(float_knob("memory.lp.p", 1.0, 16.0, Live, "p of Moneta's l_p attentional bias (SPEC §4)",
                         KNOB_FIELD(p.memory.lp_p)));
  // validate() wants q > 2: at q = 2 the normalisation M = A / ||A||_q^(q-2) does nothing.
  k.push_back(float_knob("memory.lq.q", 2.1, 16.0, Live, "q of Moneta's lq-normalize retention (SPEC §5)",
                         KNOB_FIELD(p.memory.lq_q)));
  k.push_back(float_knob("memory.huber.delta", 1e-4, 1e4, Restart,
                         "initial Huber threshold delta_t, where the delta gate's bias starts (SPEC §4)",
                         KNOB_FIELD(p.memory.huber_delta)));
  // HOPE's dgd (SPEC §5, §7; seed 004 changes 3 and 6).
  k.push_back(bool_knob("memory.dgd.per_feature", Restart,
                        "dgd: retain and lr are per-feature vectors over phi's inputs instead of one value per head",
                        KNOB_FIELD(p.memory.dgd_per_feature)));
  k.push_back(bool_knob("memory.inner.normalize", Live, "divide the inner loss (and its gradient) by its element count d_v",
                        KNOB_FIELD(p.memory.inner_normalize)));
  k.push_back(float_knob("memory.inner.clip", 0.0, 1e6, Live,
                         "clip each token's inner gradient to this Frobenius norm per head (0 = off)",
                         KNOB_FIELD(p.memory.inner_clip)));
  return k;
}

std::vector<Knob> model_knobs() {
  std::vector<Knob> k;
  k.push_back(enum_knob("model.block",
                        std::array{BlockKind::Lmm, BlockKind::Mag, BlockKind::Mal, BlockKind::Mac, BlockKind::Swa, BlockKind::Hope},
                        Restart, "block: memory as layer, memory || attention (gate), memory then attention, memory as context, attention only, HOPE",
                        KNOB_FIELD(p.model.block)));
  // HOPE (SPEC §7): the continuum memory system and the self-modifying memories' auxiliary loss.
  k.push_back(enum_knob("model.ffn", std::array{FfnKind::SwiGlu, FfnKind::Cms}, Restart,
                        "after memory/attention: a SwiGLU FFN or the continuum memory system (hope always uses cms)",
                        KNOB_FIELD(p.model.ffn)));
  k.push_back(string_knob("model.cms.periods", Restart,
                          "CMS update periods C_l, one per level, comma-separated (e.g. \"1,4,32,128\")",
                          KNOB_FIELD(p.model.cms_periods)));
  k.push_back(string_choice_knob("model.cms.variant", {"sequential", "independent", "nested"}, Restart,
                                 "CMS levels in a chain y = L_K(...L_1(x)), side by side on x with their residuals summed, "
                                 "or chained with each level restarting from the next slower level's weights when that one updates",
                                 KNOB_FIELD(p.model.cms_variant)));
  k.push_back(float_knob("model.hope.aux_weight", 0.0, 100.0, Restart,
                         "weight of HOPE's auxiliary retrieval loss that trains M_k and M_v (seed 004 change 1)",
                         KNOB_FIELD(p.model.hope_aux_weight)));
  k.push_back(bool_knob("model.hope.conv", Restart,
                        "depthwise causal conv of width 4 after the self-modifying memories' q, k and v (SPEC §2's conv; "
                        "without it a HOPE block's key cannot see the token before it)",
                        KNOB_FIELD(p.model.hope_conv)));
  k.push_back(float_knob("model.hope.self_lr_scale", 0.0, 1.0, Restart,
                         "inner lr of the self-modifying projection memories (M_k, M_v, M_eta, M_alpha) as a fraction of the "
                         "memory's eta_t (1 = SPEC §7's shared eta_t; smaller keeps keys and values steadier within a sequence)",
                         KNOB_FIELD(p.model.hope_self_lr_scale)));
  k.push_back(bool_knob("model.hope.shared_gates", Restart,
                        "one inner lr eta_t and one retain alpha_t per memory and token (the mean of the per-feature "
                        "logits) instead of one per feature",
                        KNOB_FIELD(p.model.hope_shared_gates)));
  k.push_back(int_knob("model.d_model", 4, 8192, Restart, "width of the residual stream", KNOB_FIELD(p.model.d_model)));
  k.push_back(int_knob("model.layers", 1, 256, Restart, "blocks stacked", KNOB_FIELD(p.model.layers)));
  k.push_back(int_knob("model.memory_heads", 1, 256, Restart, "memory heads per layer (must divide d_model unless memory_head_dim is set)",
                       KNOB_FIELD(p.model.memory_heads)));
  k.push_back(int_knob("model.memory_head_dim", 0, 4096, Restart, "key/value size of a memory head (0 = d_model / memory_heads)",
                       KNOB_FIELD(p.model.memory_head_dim)));
  k.push_back(int_knob("model.attention_heads", 1, 256, Restart, "sliding-window attention heads (must divide d_model)",
                       KNOB_FIELD(p.model.attention_heads)));
  k.push_back(int_knob("model.window", 1, 1 << 20, Restart, "sliding-window attention width, keys per query including itself",
                       KNOB_FIELD(p.model.window)));
  k.push_back(int_knob("model.persistent", 0, 4096, Restart, "learned persistent tokens every attention query sees",
                       KNOB_FIELD(p.model.persistent)));
  k.push_back(int_knob("model.segment", 1, 1 << 20, Restart, "MAC segment length", KNOB_FIELD(p.model.segment)));
  k.push_back(float_knob("model.ffn_mult", 0.0, 64.0, Restart, "SwiGLU hidden size as a multiple of d_model",
                         KNOB_FIELD(p.model.ffn_mult)));
  k.push_back(float_knob("model.rope_base", 1.0, 1e9, Restart, "RoPE frequency base", KNOB_FIELD(p.model.rope_base)));
  k.push_back(bool_knob("model.ttl", Restart, "test-time learning on; false freezes every memory at M_0 (the ablation)",
                        KNOB_FIELD(p.model.ttl)));
  return k;
}

std::vector<Knob> train_knobs() {
  std::vector<Knob> k;
  k.push_back(int_knob("train.steps", 0, kMany, Live, "outer training steps", KNOB_FIELD(p.train.steps)));
  k.push_back(int_knob("train.batch", 1, 1 << 16, Live, "sequences per step", KNOB_FIELD(p.train.batch)));
  k.push_back(
      int_knob("train.micro_batch", 0, 1 << 16, Live,
               "sequences per forward and backward; the step adds up their gradients (0 = the whole batch)",
               KNOB_FIELD(p.train.micro_batch)));
  k.push_back(float_knob("train.memory_limit_gb", 0.0, 1e6, Live,
                         "GB a CPU training step's tensors may take, checked on its first step (0 = four "
                         "fifths of what is free)",
                         KNOB_FIELD(p.train.memory_limit_gb)));
  k.push_back(float_knob("train.lr", 0.0, 10.0, Live, "peak AdamW learning rate (outer loop)", KNOB_FIELD(p.train.lr)));
  k.push_back(float_knob("train.min_lr", 0.0, 1.0, Live, "cosine floor as a fraction of train.lr", KNOB_FIELD(p.train.min_lr)));
  k.push_back(int_knob("train.warmup", 0, kMany, Live, "linear warmup steps", KNOB_FIELD(p.train.warmup)));
  k.push_back(float_knob("train.weight_decay", 0.0, 10.0, Live, "decoupled AdamW weight decay", KNOB_FIELD(p.train.weight_decay)));
  k.push_back(float_knob("train.beta1", 0.0, 0.999999, Live, "AdamW beta1", KNOB_FIELD(p.train.beta1)));
  k.push_back(float_knob("train.beta2", 0.0, 0.999999, Live, "AdamW beta2", KNOB_FIELD(p.train.beta2)));
  k.push_back(float_knob("train.eps", 1e-30, 1.0, Live, "AdamW epsilon", KNOB_FIELD(p.train.eps)));
  k.push_back(float_knob("train.clip", 0.0, 1e9, Live, "global gradient-norm clip (0 = off)", KNOB_FIELD(p.train.clip)));
  k.push_back(int_knob("train.bptt", 0, 1 << 24, Live, "truncated-BPTT segment length (0 = whole sequence)", KNOB_FIELD(p.train.bptt)));
  {
    // The rule keeps its own copy (MemoryRule::train_chunk, its preferred chunk); both follow the knob.
    Knob c = int_knob("train.chunk", 1, 1 << 20, Live, "chunkwise size b of the memory in training (TNT stage 1)",
                      KNOB_FIELD(p.train.chunk));
    c.set = [](Preset& p, const KnobValue& v) { p.train.chunk = p.memory.train_chunk = std::get<int64_t>(v); };
    k.push_back(std::move(c));
  }
  k.push_back(int_knob("train.chunk_final", 0, 1 << 20, Live, "chunk size b of TNT stage 2 (0 = no second stage)",
                       KNOB_FIELD(p.train.chunk_final)));
  k.push_back(float_knob("train.final_fraction", 0.0, 1.0, Live, "share of the steps trained with chunk_final",
                         KNOB_FIELD(p.train.final_fraction)));
  k.push_back(bool_knob("train.module_norms", Live,
                        "measure each module's outer gradient norm and update-to-weight ratio every step",
                        KNOB_FIELD(p.train.module_norms)));
  k.push_back(bool_knob(
      "train.bf16_autocast", Live,
      "run the training forward's matrix products in bfloat16 (autocast; for a GPU, where bf16 is fast)",
      KNOB_FIELD(p.train.bf16_autocast)));
  k.push_back(int_knob("train.log_every", 1, kMany, Live, "steps between progress lines", KNOB_FIELD(p.train.log_every)));
  k.push_back(int_knob("train.eval_every", 0, kMany, Live, "steps between evaluations (0 = only at the end)",
                       KNOB_FIELD(p.train.eval_every)));
  k.push_back(int_knob("train.eval_batches", 1, 1 << 20, Live, "batches per evaluation", KNOB_FIELD(p.train.eval_batches)));
  // Restart: the seed draws the initial parameters.
  k.push_back(int_knob("train.seed", 0, kSeedMax, Restart, "seed of the initial parameters and the training data",
                       KNOB_FIELD(p.train.seed)));
  return k;
}

std::vector<Knob> task_knobs() {
  // Bounds from task.h; make_task checks each task's own constraints (pairs <= keys, ...).
  const double vocab = static_cast<double>(kMaxTaskVocab);
  const double len = static_cast<double>(kMaxTaskSeqLen);
  std::vector<Knob> k;
  k.push_back(string_choice_knob("task.kind", {"mqar", "needle", "copy", "text"}, Restart,
                                 "what feeds the model: associative recall, a needle, selective copy, or a text file",
                                 KNOB_FIELD(p.task.kind)));
  k.push_back(int_knob("task.keys", 1, vocab, Restart, "mqar/needle: size of the key half of the vocabulary", KNOB_FIELD(p.task.keys)));
  k.push_back(int_knob("task.values", 1, vocab, Restart, "mqar/needle: size of the value half; copy: the content alphabet",
                       KNOB_FIELD(p.task.values)));
  k.push_back(int_knob("task.pairs", 1, vocab, Restart, "mqar: key-value pairs per sequence", KNOB_FIELD(p.task.pairs)));
  k.push_back(int_knob("task.queries", 1, vocab, Restart, "mqar: queries per sequence (distinct keys, <= pairs)",
                       KNOB_FIELD(p.task.queries)));
  k.push_back(int_knob("task.gap", 0, len, Restart, "mqar: filler tokens between the last pair and the first query",
                       KNOB_FIELD(p.task.gap)));
  k.push_back(int_knob("task.seq_len", 1, len, Restart, "needle/copy/text: sequence length (mqar derives its own)",
                       KNOB_FIELD(p.task.seq_len)));
  k.push_back(int_knob("task.copy_tokens", 1, static_cast<double>((kMaxTaskSeqLen - 1) / 2), Restart,
                       "copy: tokens to remember", KNOB_FIELD(p.task.copy_tokens)));
  k.push_back(string_knob("task.text_path", Restart, "text: a UTF-8 file to model byte by byte", KNOB_FIELD(p.task.text_path)));
  return k;
}

std::vector<Knob> probe_detect_engine_record_knobs() {
  std::vector<Knob> k;
  // Measurement (SPEC §8): what the engine records, never what the model computes, so all live.
  k.push_back(int_knob("probe.every", 0, 1e6, Live, "probe metrics every K engine steps (0 = probes off)", KNOB_FIELD(p.probe.every)));
  k.push_back(int_knob("probe.matrices_every", 0, 1e6, Live, "M, S and dM snapshots every K steps (0 = never)",
                       KNOB_FIELD(p.probe.matrices_every)));
  k.push_back(int_knob("probe.downsample", 2, 4096, Live, "largest side of a displayed matrix snapshot",
                       KNOB_FIELD(p.probe.downsample)));
  k.push_back(bool_knob("probe.full_matrices", Live, "snapshots at full size instead of downsampled",
                        KNOB_FIELD(p.probe.full_matrices)));

  k.push_back(float_knob("detect.spike_threshold", 0.5, 1000.0, Live, "z-score at which a metric spike becomes an event (SPEC §8)",
                         KNOB_FIELD(p.detect.spike_threshold)));
  k.push_back(float_knob("detect.spike_half_life", 1.0, 1e6, Live, "half-life of the spike detector's EMA, in probed steps",
                         KNOB_FIELD(p.detect.spike_half_life)));
  k.push_back(int_knob("detect.spike_warmup", 0, 1e6, Live, "samples before a spike or norm-growth event can fire", KNOB_FIELD(p.detect.spike_warmup)));
  k.push_back(float_knob("detect.ns_error", 0.0, 100.0, Live, "Newton-Schulz orthogonality error that fires an event (0 = off)",
                         KNOB_FIELD(p.detect.ns_error)));
  k.push_back(float_knob("detect.ns_degraded", 0.0, 10.0, Live,
                         "NS orthogonality error this far above its usual value at the same place in a sequence fires an event (0 = off)",
                         KNOB_FIELD(p.detect.ns_degraded)));
  k.push_back(float_knob("detect.norm_growth", 0.0, 1e6, Live, "||M|| over its largest in the last 64 probes that fires an event (0 = off)",
                         KNOB_FIELD(p.detect.norm_growth)));
  k.push_back(float_knob("detect.lr_jump", 0.0, 1e6, Live,
                         "the outer learning rate rising by more than this factor in one training step fires a spike (0 = off)",
                         KNOB_FIELD(p.detect.lr_jump)));
  k.push_back(float_knob("detect.loss_floor", 0.0, 1e3, Live,
                         "nats the training loss must rise above its moving mean to be a spike; gradient-norm spikes ride on it (0 = off)",
                         KNOB_FIELD(p.detect.loss_floor)));

  k.push_back(enum_knob("engine.mode", std::array{EngineMode::Train, EngineMode::Inspect, EngineMode::TrainInspect}, Live,
                        "what the engine runs: train, step a probe sequence, or train and re-step it every inspect_every",
                        KNOB_FIELD(p.engine.mode)));
  k.push_back(int_knob("engine.inspect_every", 1, kMany, Live, "train+inspect: train steps between re-steps of the probe sequence",
                       KNOB_FIELD(p.engine.inspect_every)));
  k.push_back(int_knob("engine.inspect_tokens", 0, 1 << 24, Live, "train+inspect: tokens per re-step (0 = one probe sequence)",
                       KNOB_FIELD(p.engine.inspect_tokens)));
  k.push_back(int_knob("engine.probe_seed", 0, kSeedMax, Live, "which task sequences inspect steps through",
                       KNOB_FIELD(p.engine.probe_seed)));
  k.push_back(int_knob("engine.inspect_batch", 0, kMany, Live,
                       "inspect steps the batch of this training step, row by row, in the trainer's chunk form (0 = probe sequences)",
                       KNOB_FIELD(p.engine.inspect_batch)));
  k.push_back(float_knob("engine.frame_budget_mb", 1.0, 1 << 20, Live, "memory for the ring of recorded frames, MiB",
                         KNOB_FIELD(p.engine.frame_budget_mb)));
  k.push_back(int_knob("engine.keyframe_every", 0, 1e6, Live, "engine steps between keyframes for rewind and fork (0 = only the start)",
                       KNOB_FIELD(p.engine.keyframe_every)));
  k.push_back(float_knob("engine.keyframe_budget_mb", 0.01, 1 << 20, Live, "memory for keyframes, MiB (older ones are thinned)",
                         KNOB_FIELD(p.engine.keyframe_budget_mb)));
  k.push_back(bool_knob("engine.overlap", Live,
                        "measure this inspect token's probes on a second thread while the next token steps; with forks the other way round (CPU; same frames)",
                        KNOB_FIELD(p.engine.overlap)));
  k.push_back(bool_knob("engine.cuda_graph", Live,
                        "replay a CUDA model's inspect step and training pass as CUDA graphs once their "
                        "shapes are fixed (re-captured after any change; CUDA only)",
                        KNOB_FIELD(p.engine.cuda_graph)));

  // Recording (DESIGN "Sessions"): read when a recording starts, never by the model, so all live.
  k.push_back(enum_knob("record.matrix_dtype", std::array{MatrixDtype::F32, MatrixDtype::F16, MatrixDtype::BF16}, Live,
                        "storage of the recorded M, S and dM snapshots (f16/bf16 halve the session)",
                        KNOB_FIELD(p.record.matrix_dtype)));
  k.push_back(int_knob("record.matrix_every", 0, 1e6, Live, "record the snapshots of steps divisible by N (0 = no matrices)",
                       KNOB_FIELD(p.record.matrix_every)));
  k.push_back(int_knob("record.chunk_steps", 1, 1 << 20, Live, "frames per session chunk file (a crash loses at most one chunk)",
                       KNOB_FIELD(p.record.chunk_steps)));
  k.push_back(float_knob("record.flush_seconds", 0.05, 3600.0, Live, "seconds before a partial chunk is written anyway",
                         KNOB_FIELD(p.record.flush_seconds)));
  k.push_back(float_knob("record.queue_mb", 0.001, 1 << 20, Live, "frames waiting for the disk before the engine waits, MiB",
                         KNOB_FIELD(p.record.queue_mb)));
  return k;
}

#undef KNOB_FIELD

std::vector<Knob> build_registry() {
  std::vector<Knob> all;
  for (auto part : {memory_knobs(), model_knobs(), train_knobs(), task_knobs(), probe_detect_engine_record_knobs()})
    for (auto& k : part) all.push_back(std::move(k));
  std::sort(all.begin(), all.end(), [](const Knob& a, const Knob& b) { return a.name < b.name; });
  return all;
}

// Shortest text that reads back as the same double (std::to_chars).
std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A TOML float literal: like shortest() but always recognisably a float ("1.0", not "1").
std::string float_literal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = shortest(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string triple_literal(const KnobTriple& t) {
  return "[" + float_literal(t[0]) + ", " + float_literal(t[1]) + ", " + float_literal(t[2]) + "]";
}

std::string string_literal(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// shortest() for people (ranges and messages): "1e6" and "1e-4" rather than "1e+06" and "1e-04".
std::string readable(double v) {
  std::string s = shortest(v);
  const auto e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exponent = s.substr(e + 1);
  const bool negative = exponent[0] == '-';
  exponent.erase(0, exponent.find_first_not_of("+-0"));
  return s.substr(0, e + 1) + (negative ? "-" : "") + (exponent.empty() ? "0" : exponent);
}

std::string range_number(const Knob& k, double v) {
  return k.type == KnobType::Int ? std::to_string(static_cast<int64_t>(v)) : readable(v);
}

bool finite(const KnobTriple& t) { return std::isfinite(t[0]) && std::isfinite(t[1]) && std::isfinite(t[2]); }

const char* expected_type(KnobType type) {
  switch (type) {
    case KnobType::Int: return "expected an integer";
    case KnobType::Float: return "expected a number";
    case KnobType::Bool: return "expected true or false";
    case KnobType::Choice: return "expected a string";
    case KnobType::String: return "expected a string";
    case KnobType::Coefficients: return "expected an array of 3 numbers [a, b, c]";
    case KnobType::CoefficientList: return "expected an array of [a, b, c] triples";
  }
  return "expected a value";
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> registry = build_registry();
  return registry;
}

const Knob* find_knob(const std::string& name) {
  const auto& all = knobs();
  const auto it = std::lower_bound(all.begin(), all.end(), name, [](const Knob& k, const std::string& n) { return k.name < n; });
  return it != all.end() && it->name == name ? &*it : nullptr;
}

bool knob_is_live(const std::string& name) {
  const Knob* k = find_knob(name);
  return k && k->apply == KnobApply::Live;
}

const char* to_string(KnobType type) {
  switch (type) {
    case KnobType::Int: return "int";
    case KnobType::Float: return "float";
    case KnobType::Bool: return "bool";
    case KnobType::Choice: return "choice";
    case KnobType::String: return "string";
    case KnobType::Coefficients: return "coefficients";
    case KnobType::CoefficientList: return "coefficient-list";
  }
  return "?";
}

const char* to_string(KnobApply apply) { return apply == KnobApply::Live ? "live" : "restart"; }

std::string format_knob_value(const Knob& knob, const KnobValue& value) {
  struct Format {
    const Knob& knob;
    std::string operator()(int64_t v) const {
      return knob.type == KnobType::Float ? float_literal(static_cast<double>(v)) : std::to_string(v);
    }
    std::string operator()(double v) const { return float_literal(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return string_literal(v); }
    std::string operator()(const KnobTriple& v) const { return triple_literal(v); }
    std::string operator()(const std::vector<KnobTriple>& v) const {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + triple_literal(v[i]);
      return out + "]";
    }
  };
  return std::visit(Format{knob}, value);
}

std::string knob_default(const Knob& knob) { return format_knob_value(knob, knob.get(Preset{})); }

std::string knob_value(const Preset& preset, const Knob& knob) { return format_knob_value(knob, knob.get(preset)); }

std::string knob_range(const Knob& knob) {
  switch (knob.type) {
    case KnobType::Int:
    case KnobType::Float: return "[" + range_number(knob, knob.min) + ", " + range_number(knob, knob.max) + "]";
    case KnobType::Bool: return "true | false";
    case KnobType::Choice: {
      std::string out;
      for (const auto& c : knob.choices) out += (out.empty() ? "" : " | ") + c;
      return out;
    }
    case KnobType::String: return "text";
    case KnobType::Coefficients: return "[a, b, c]";
    case KnobType::CoefficientList: return "[[a, b, c], ...]";
  }
  return "";
}

std::string knob_value_error(const Knob& knob, const KnobValue& value) {
  switch (knob.type) {
    case KnobType::Int: {
      const auto* v = std::get_if<int64_t>(&value);
      if (!v) return expected_type(knob.type);
      if (*v < static_cast<int64_t>(knob.min) || *v > static_cast<int64_t>(knob.max))
        return "must be in " + knob_range(knob) + ", got " + std::to_string(*v);
      return "";
    }
    case KnobType::Float: {
      if (!std::holds_alternative<double>(value) && !std::holds_alternative<int64_t>(value))
        return expected_type(knob.type);
      const double v = as_double(value);
      if (!(v >= knob.min && v <= knob.max)) return "must be in " + knob_range(knob) + ", got " + readable(v);
      return "";
    }
    case KnobType::Bool: return std::holds_alternative<bool>(value) ? "" : expected_type(knob.type);
    case KnobType::Choice: {
      std::string allowed;
      for (const auto& c : knob.choices) allowed += (allowed.empty() ? "" : ", ") + c;
      const auto* v = std::get_if<std::string>(&value);
      if (!v) return "expected one of " + allowed;
      if (std::find(knob.choices.begin(), knob.choices.end(), *v) == knob.choices.end())
        return "unknown value '" + *v + "' (expected one of " + allowed + ")";
      return "";
    }
    case KnobType::String: return std::holds_alternative<std::string>(value) ? "" : expected_type(knob.type);
    case KnobType::Coefficients: {
      const auto* v = std::get_if<KnobTriple>(&value);
      if (!v) return expected_type(knob.type);
      return finite(*v) ? "" : "coefficients must be finite";
    }
    case KnobType::CoefficientList: {
      const auto* v = std::get_if<std::vector<KnobTriple>>(&value);
      if (!v) return expected_type(knob.type);
      for (const auto& t : *v)
        if (!finite(t)) return "coefficients must be finite";
      return "";
    }
  }
  return "";
}

std::vector<std::string> changed_knobs(const Preset& a, const Preset& b) {
  std::vector<std::string> names;
  for (const auto& k : knobs())
    if (k.get(a) != k.get(b)) names.push_back(k.name);
  return names;  // knobs() is sorted, so these are too
}

std::string restart_knob_changed(const Preset& a, const Preset& b) {
  for (const auto& k : knobs())
    if (k.apply == KnobApply::Restart && k.get(a) != k.get(b)) return k.name;
  return {};
}

std::vector<std::string> knob_keys(const std::string& table) {
  const std::string prefix = table.empty() ? "" : table + ".";
  std::set<std::string> keys;
  for (const auto& k : knobs()) {
    if (k.name.compare(0, prefix.size(), prefix) != 0 || k.name.size() == prefix.size()) continue;
    const std::string rest = k.name.substr(prefix.size());
    keys.insert(rest.substr(0, rest.find('.')));
  }
  return {keys.begin(), keys.end()};
}

}  // namespace memscope::model
