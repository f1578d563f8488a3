// One session chunk (frames-NNNNNN.safetensors, DESIGN "Sessions"): the frames of up to
// record.chunk_steps steps as dense tensors with a leading step axis, so Python reads a series
// with one `f["layer0/head1/erank"]`.
//
//   step, train_step, sequence, token_index, token, target, predicted   [K] I64
//   seq [K] I64: the frame's place in the recording, across timelines (rewinds and forks are
//                read back in this order)
//   timeline [K] I32, kind [K] U8 (0 train, 1 inspect), has_probes [K] U8
//   loss, acc, grad_norm, lr, tokens_per_s, seconds                     [K] F64
//   cms_levels, feature_rows, feature_dim [K] I32; extras [K] U8: which HOPE arrays a row has
//   cms_norm, cms_tick [K, layers, levels], selfmod_error [K, layers, 5], selfmod_retention [K, layers, 2],
//   retain_feature, lr_feature [K, layers, rows, dim]                  F32 (HOPE, SPEC §7; NaN: absent)
//   layer{L}/head{H}/{head metric}                                      [K] F32 (NaN: not measured)
//   layer{L}/head{H}/[{weight}/]{weight metric}                         [K] F32
//   layer{L}/head{H}/[{weight}/]{M|S|dM}                                [Km, rows, cols] F32/F16/BF16
//   layer{L}/head{H}/[{weight}/]{M|S|dM}.row                            [Km] I32: the rows it was kept at
//
// Each snapshot has its own rows: train frames snapshot M and S, inspect frames also ΔM.
//
// The weight folder is left out for the linear memory's single weight "M". `__metadata__` holds
// first_step, last_step, rows, wall_time and the layout (layers, heads, weights, snapshots).
// Torch-free: the writer thread, the reader and the fuzzer use it without LibTorch.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/probe/frame.h"
#include "model/session/record_config.h"
#include "model/session/safetensors_reader.h"

namespace memscope::model {

inline constexpr const char* kChunkFormat = "memscope-frames/1";

// "layer0/head1/" + "W1/" for an MLP weight + name.
std::string chunk_tensor_name(int layer, int head, const std::string& weight, const std::string& name);

class ChunkBuilder {
 public:
  static constexpr size_t kExtraArrays = 10;  // HOPE's arrays, the module norms, the batch row's losses: kExtras
  static constexpr size_t kIdArrayCount = 2;     // the batch row's tokens and targets (I64): frame_chunk.cpp's kIdArrays

  explicit ChunkBuilder(const RecordConfig& config) : config_(config) {}

  // False when the frame's probe layout (layers, heads, weights, snapshot shapes) differs from the
  // frames already held: the caller writes this chunk and starts a new one.
  bool fits(const Frame& frame) const;
  // Requires fits(frame). `seq` is the frame's place in the recording (every frame recorded before
  // it, all timelines); −1 numbers the rows from 0 (an export).
  void add(const Frame& frame, int64_t seq = -1);
  int64_t rows() const { return static_cast<int64_t>(kinds_.size()); }
  bool empty() const { return kinds_.empty(); }
  int64_t first_step() const { return empty() ? 0 : ints_[0].front(); }
  int64_t last_step() const { return empty() ? 0 : ints_[0].back(); }

  // The chunk's file bytes; `where` names it in errors. `extra` joins the metadata (an export's
  // session and events); a negative wall_time leaves it out.
  std::string encode(const std::string& where, double wall_time,
                     const std::map<std::string, std::string>& extra = {}) const;
  void clear();

 private:
  // One snapshot series: its shape, the rows it was kept at and their values.
  struct Series {
    std::string name;  // chunk_tensor_name(layer, head, weight, tensor)
    int layer, head;
    std::string weight, tensor;
    int rows, cols, full_rows, full_cols;
    std::vector<int32_t> at_rows;
    std::vector<float> values;  // [at_rows, rows·cols]
  };
  bool keeps_matrices(const Frame& frame) const;
  static std::vector<int64_t> extra_shape(const Frame& frame, size_t i);
  const Series* find_series(const std::string& name) const;

  RecordConfig config_;
  // Columns, one entry per row: the integer and real fields in frame_chunk.cpp's column tables
  // (ints_[0] is the step), then the rest.
  std::array<std::vector<int64_t>, 7> ints_;
  std::array<std::vector<double>, 6> reals_;
  std::vector<int64_t> seqs_;
  std::array<std::vector<int32_t>, 3> extra_ints_;  // cms_levels, feature_rows, feature_dim
  std::vector<int32_t> extras_;  // bit i: the row has extra array i, then the id arrays (U8 before the ninth)
  std::vector<std::string> module_names_;            // of the module arrays, from the first row that has them
  std::array<std::vector<int64_t>, kExtraArrays> extra_shape_;  // per row, from the first row that has it
  std::array<std::vector<float>, kExtraArrays> extra_values_;   // [rows, elements of extra_shape_]
  // The id arrays, mask bits kExtraArrays + j: their length (0 until a row has one), [rows, length], −1 where none.
  std::array<size_t, kIdArrayCount> id_length_{};
  std::array<std::vector<int64_t>, kIdArrayCount> id_values_;
  std::vector<int32_t> timelines_;
  std::vector<uint8_t> kinds_, has_probes_;
  // Probe layout (from the first probed frame) and the row-major metric blocks, NaN for unprobed rows.
  int layers_ = 0, heads_ = 0;
  std::vector<std::string> weights_;
  bool have_layout_ = false;
  std::vector<float> head_block_, weight_block_;  // [rows, L·H·Kh], [rows, L·H·W·Kw]
  // In the order frames list their snapshots (a frame's order is kept when it reads back).
  std::vector<Series> series_;
};

// The frames of a chunk, in row order. Snapshots stored as f16/bf16 come back widened. Throws
// UserError naming the file when a tensor is missing, has the wrong dtype or shape, or the layout
// metadata is malformed.
std::vector<Frame> decode_chunk(const SafetensorsFile& file);

// Only the step and timeline columns: what the session index needs from each chunk.
// With `seqs`, the seq column too.
void read_chunk_steps(const SafetensorsFile& file, std::vector<int64_t>& steps, std::vector<int32_t>& timelines,
                      std::vector<int64_t>* seqs = nullptr);

}  // namespace memscope::model
