#include "model/session/record_config.h"

namespace memscope::model {

const char* to_string(MatrixDtype dtype) {
  switch (dtype) {
    case MatrixDtype::F32: return "f32";
    case MatrixDtype::F16: return "f16";
    case MatrixDtype::BF16: return "bf16";
  }
  return "?";
}

}  // namespace memscope::model
