// The model knobs (`model.*`): the language model's shape and which block it stacks.
#pragma once
#include <cstdint>
#include <string>

namespace memscope::model {

// How memory and attention combine in one block (Titans §4).
enum class BlockKind {
  Lmm,  // the memory as the layer
  Mag,  // memory ∥ sliding-window attention, mixed by a learned gate
  Mal,  // memory, then sliding-window attention
  Mac,  // segments attend over persistent, retrieved-memory and segment tokens; memory written from the output
  Swa,  // sliding-window attention only: the no-memory baseline
  Hope, // HOPE (SPEC §7): self-modifying Titans, then the CMS in place of the FFN; no attention
};
const char* to_string(BlockKind kind);

// What follows the memory/attention part of a block (HOPE always uses the CMS).
enum class FfnKind { SwiGlu, Cms };
const char* to_string(FfnKind kind);

struct LmConfig {
  BlockKind block = BlockKind::Mag;  // model.block
  int64_t vocab = 0;                 // from the task (not a knob)
  int64_t d_model = 64;              // model.d_model
  int64_t layers = 2;                // model.layers
  int64_t memory_heads = 2;          // model.memory_heads
  int64_t memory_head_dim = 0;       // model.memory_head_dim: 0 means d_model / memory_heads
  int64_t attention_heads = 2;       // model.attention_heads
  int64_t window = 16;               // model.window: sliding-window attention width (keys per query incl. itself)
  int64_t persistent = 4;            // model.persistent: learned tokens every attention query sees
  int64_t segment = 16;              // model.segment: MAC segment length
  double ffn_mult = 2.0;             // model.ffn_mult: SwiGLU hidden = ffn_mult · d_model
  double rope_base = 10000.0;        // model.rope_base
  bool ttl = true;                   // model.ttl: false freezes every memory at M_0 (the seeds' ablation)
  FfnKind ffn = FfnKind::SwiGlu;     // model.ffn: SwiGLU, or the continuum memory system (SPEC §7)
  std::string cms_periods = "1,4,32,128";  // model.cms.periods: C_l per CMS level, comma-separated
  std::string cms_variant = "sequential";  // model.cms.variant: sequential | independent | nested (NL §7)
  double hope_aux_weight = 0.1;            // model.hope.aux_weight: weight of the auxiliary retrieval loss
  bool hope_conv = false;                  // model.hope.conv: depthwise causal conv (width 4) after q, k and v
  double hope_self_lr_scale = 1.0;         // model.hope.self_lr_scale: η of M_k, M_v, M_η, M_α relative to M's
  bool hope_shared_gates = false;          // model.hope.shared_gates: one η_t and α_t per memory, not per feature

  // A MemoryLayer (SPEC §3-§6) with its probes; HOPE's memories are its own modules.
  bool has_memory() const { return block != BlockKind::Swa && block != BlockKind::Hope; }
  bool has_attention() const { return block != BlockKind::Lmm && block != BlockKind::Hope; }
  bool uses_cms() const { return block == BlockKind::Hope || ffn == FfnKind::Cms; }
};

}  // namespace memscope::model
