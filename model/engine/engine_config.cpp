#include "model/engine/engine_config.h"

namespace memscope::model {

const char* to_string(EngineMode mode) {
  switch (mode) {
    case EngineMode::Train: return "train";
    case EngineMode::Inspect: return "inspect";
    case EngineMode::TrainInspect: return "train+inspect";
  }
  return "?";
}

}  // namespace memscope::model
