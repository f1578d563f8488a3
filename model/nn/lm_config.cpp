#include "model/nn/lm_config.h"

namespace memscope::model {

const char* to_string(BlockKind kind) {
  switch (kind) {
    case BlockKind::Lmm: return "lmm";
    case BlockKind::Mag: return "mag";
    case BlockKind::Mal: return "mal";
    case BlockKind::Mac: return "mac";
    case BlockKind::Swa: return "swa";
    case BlockKind::Hope: return "hope";
  }
  return "?";
}

const char* to_string(FfnKind kind) { return kind == FfnKind::SwiGlu ? "swiglu" : "cms"; }

}  // namespace memscope::model
