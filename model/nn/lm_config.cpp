#include "model/nn/lm_config.h"

namespace memscope::model {

const char* to_string(BlockKind kind) {
  switch (kind) {
    case BlockKind::Lmm: return "lmm";
    case BlockKind::Mag: return "mag";
    case BlockKind::Mal: return "mal";
    case BlockKind::Mac: return "mac";
    case BlockKind::Swa: return "swa";
  }
  return "?";
}

}  // namespace memscope::model
