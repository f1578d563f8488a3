#include "model/config/knob_relevance.h"

#include "model/config/knobs.h"
#include "model/config/preset.h"

namespace memscope::model {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A memory-rule knob that only one setting of another knob reads.
std::string unused_memory_knob(const std::string& name, const MemoryRule& m) {
  if (name == "memory.lp.p" && m.bias != Bias::Lp) return "read only with memory.bias = lp";
  if (name == "memory.huber.delta" && m.bias != Bias::Huber) return "read only with memory.bias = huber";
  if (name == "memory.lq.q" && m.retention != Retention::LqNormalize) return "read only with memory.retention = lq-normalize";
  if (name == "memory.ns.steps" && m.optimiser != Optimiser::Muon) return "read only with memory.optimiser = muon";
  if (name == "memory.dgd.per_feature" && m.optimiser != Optimiser::Dgd) return "read only with memory.optimiser = dgd";
  if ((name == "memory.feature_map.degree" || name == "memory.feature_map.learnable") && m.feature_map != FeatureMapKind::Poly)
    return "read only with memory.feature_map.kind = poly";
  return "";
}

}  // namespace

std::string knob_unused_reason(const Knob& knob, const Preset& p) {
  const std::string& name = knob.name;
  const LmConfig& lm = p.model;
  if (starts_with(name, "memory.")) {
    if (lm.block == BlockKind::Swa) return "a swa model has no memory";
    if (lm.block == BlockKind::Hope && name != "memory.lr.max" && name != "memory.inner.clip")
      return "HOPE's self-modifying memories read only memory.lr.max and memory.inner.clip of the memory rule (SPEC §7)";
    return lm.block == BlockKind::Hope ? "" : unused_memory_knob(name, p.memory);
  }
  if (starts_with(name, "model.hope.") && lm.block != BlockKind::Hope) return "read only with model.block = hope";
  if (starts_with(name, "model.cms.") && !lm.uses_cms()) return "read only with the CMS (model.ffn = cms, or hope blocks)";
  if (name == "model.ffn" && lm.block == BlockKind::Hope) return "hope blocks always use the CMS";
  if (name == "model.ffn_mult" && lm.uses_cms()) return "the SwiGLU FFN's width: this model uses the CMS";
  if ((name == "model.memory_heads" || name == "model.memory_head_dim") && !lm.has_memory())
    return lm.block == BlockKind::Hope ? "HOPE's memories are one head of width model.d_model" : "a swa model has no memory";
  if ((name == "model.attention_heads" || name == "model.window" || name == "model.persistent") && !lm.has_attention())
    return "this model has no attention (model.block = " + std::string(to_string(lm.block)) + ")";
  if (name == "model.segment" && lm.block != BlockKind::Mac) return "read only with model.block = mac";
  return "";
}

}  // namespace memscope::model
