// The recording knobs (`record.*`): how a session is written (DESIGN "Sessions"). They are read
// when a recording starts; a change applies to the next recording.
#pragma once
#include <cstdint>

namespace memscope::model {

enum class MatrixDtype { F32, F16, BF16 };
const char* to_string(MatrixDtype dtype);  // "f32", "f16", "bf16"

struct RecordConfig {
  MatrixDtype matrix_dtype = MatrixDtype::F32;  // record.matrix_dtype: storage of M, S and ΔM snapshots
  int64_t matrix_every = 1;     // record.matrix_every: keep the snapshots of steps divisible by N (0 = none)
  int64_t chunk_steps = 256;    // record.chunk_steps: frames per frames-NNNNNN.safetensors
  double flush_seconds = 2.0;   // record.flush_seconds: a partial chunk is written after this long
  double queue_mb = 64.0;       // record.queue_mb: frames waiting for the disk before the engine waits
};

}  // namespace memscope::model
