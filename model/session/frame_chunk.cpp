#include "model/session/frame_chunk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "model/session/half_float.h"
#include "model/session/safetensors_blob_writer.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The scalar columns, in file order. Kept in one table so encode and decode cannot drift apart.
struct IntColumn {
  const char* name;
  int64_t Frame::*field;
};
constexpr std::array<IntColumn, 7> kIntColumns{{{"step", &Frame::step},
                                                 {"train_step", &Frame::train_step},
                                                 {"sequence", &Frame::sequence},
                                                 {"token_index", &Frame::token_index},
                                                 {"token", &Frame::token},
                                                 {"target", &Frame::target},
                                                 {"predicted", &Frame::predicted}}};
struct RealColumn {
  const char* name;
  double Frame::*field;
};
constexpr std::array<RealColumn, 6> kRealColumns{{{"loss", &Frame::loss},
                                                   {"acc", &Frame::acc},
                                                   {"grad_norm", &Frame::grad_norm},
                                                   {"lr", &Frame::lr},
                                                   {"tokens_per_s", &Frame::tokens_per_s},
                                                   {"seconds", &Frame::seconds}}};

// HOPE's arrays (issue 8): whole per-row blocks, present or not. The order is the bit order of
// the `extras` mask in files already written: new arrays go at the end.
// [layers, levels], [layers, n], [layers, rows, dim], [modules] (names in __metadata__ "modules"),
// [tokens of the batch row]
enum class ExtraLayout { PerLevel, PerLayer, PerFeature, PerModule, PerToken };
struct ExtraArray {
  const char* name;
  std::vector<float> Frame::*field;
  ExtraLayout layout;
};
constexpr std::array<ExtraArray, ChunkBuilder::kExtraArrays> kExtras{{{"cms_norm", &Frame::cms_norm, ExtraLayout::PerLevel},
                                             {"cms_tick", &Frame::cms_tick, ExtraLayout::PerLevel},
                                             {"selfmod_error", &Frame::selfmod_error, ExtraLayout::PerLayer},
                                             {"retain_feature", &Frame::retain_feature, ExtraLayout::PerFeature},
                                             {"lr_feature", &Frame::lr_feature, ExtraLayout::PerFeature},
                                             {"selfmod_retention", &Frame::selfmod_retention, ExtraLayout::PerLayer},
                                             {"module_grad_norm", &Frame::module_grad_norm, ExtraLayout::PerModule},
                                             {"module_update_ratio", &Frame::module_update_ratio, ExtraLayout::PerModule},
                                             {"selfmod_grad", &Frame::selfmod_grad, ExtraLayout::PerLayer},
                                             {"batch_loss", &Frame::batch_loss, ExtraLayout::PerToken}}};
// Train frames' batch row (the train view, issue 19): token ids, I64 [rows, T], −1 where a row has
// none; their mask bits follow kExtras'.
struct IdArray {
  const char* name;
  std::vector<int64_t> Frame::*field;
};
constexpr std::array<IdArray, ChunkBuilder::kIdArrayCount> kIdArrays{{{"batch_tokens", &Frame::batch_tokens},
                                                                  {"batch_targets", &Frame::batch_targets}}};
struct ExtraInt {
  const char* name;
  int Frame::*field;
};
constexpr std::array<ExtraInt, 3> kExtraInts{{{"cms_levels", &Frame::cms_levels},
                                              {"feature_rows", &Frame::feature_rows},
                                              {"feature_dim", &Frame::feature_dim}}};

StDtype storage_dtype(MatrixDtype d) {
  switch (d) {
    case MatrixDtype::F16: return StDtype::F16;
    case MatrixDtype::BF16: return StDtype::BF16;
    case MatrixDtype::F32: break;
  }
  return StDtype::F32;
}

[[noreturn]] void bad(const SafetensorsFile& file, const std::string& what) {
  throw UserError(file.path() + ": " + what);
}

// The tensor `name` checked to have `dtype` and `shape`; its bytes.
std::vector<unsigned char> read_checked(const SafetensorsFile& file, const std::string& name, StDtype dtype,
                                        const std::vector<int64_t>& shape) {
  const StTensorInfo* t = file.find(name);
  if (!t) bad(file, "tensor " + st_quote(name) + " is missing");
  if (t->dtype != dtype || t->shape != shape) {
    std::string want;
    for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    bad(file, "tensor " + st_quote(name) + " should be " + st_dtype_name(dtype) + " [" + want + "]");
  }
  return file.read(*t);
}

template <typename T>
std::vector<T> read_column(const SafetensorsFile& file, const std::string& name, StDtype dtype, int64_t rows) {
  const auto bytes = read_checked(file, name, dtype, {rows});
  std::vector<T> out(static_cast<size_t>(rows));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

int64_t metadata_int(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.header().metadata.find(key);
  if (it == file.header().metadata.end()) bad(file, "__metadata__ has no '" + key + "'");
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing text");
    return v;
  } catch (const std::exception&) {
    bad(file, "__metadata__['" + key + "'] is not an integer");
  }
}

template <typename T>
void append(std::vector<StBlob>& blobs, const std::string& name, StDtype dtype, const std::vector<T>& column) {
  blobs.push_back({name, dtype, {static_cast<int64_t>(column.size())}, column.data()});
}

}  // namespace

std::string chunk_tensor_name(int layer, int head, const std::string& weight, const std::string& name) {
  std::string out = "layer" + std::to_string(layer) + "/head" + std::to_string(head) + "/";
  if (weight != "M") out += weight + "/";
  return out + name;
}

const ChunkBuilder::Series* ChunkBuilder::find_series(const std::string& name) const {
  for (const auto& s : series_)
    if (s.name == name) return &s;
  return nullptr;
}

bool ChunkBuilder::keeps_matrices(const Frame& frame) const {
  return !frame.matrices.empty() && config_.matrix_every > 0 && frame.step % config_.matrix_every == 0;
}

std::vector<int64_t> ChunkBuilder::extra_shape(const Frame& frame, size_t i) {
  const auto n = static_cast<int64_t>((frame.*kExtras[i].field).size());
  const int64_t layers = frame.layers;
  if (n == 0) return {};
  const ExtraLayout layout = kExtras[i].layout;
  if (layout == ExtraLayout::PerLevel && layers > 0 && frame.cms_levels > 0 && n == layers * frame.cms_levels)
    return {layers, frame.cms_levels};
  if (layout == ExtraLayout::PerLayer && layers > 0 && n % layers == 0) return {layers, n / layers};
  if (layout == ExtraLayout::PerFeature && layers > 0 && n == layers * frame.feature_rows * frame.feature_dim)
    return {layers, frame.feature_rows, frame.feature_dim};
  return {n};
}

bool ChunkBuilder::fits(const Frame& frame) const {
  for (size_t i = 0; i < kExtras.size(); ++i) {
    const auto shape = extra_shape(frame, i);
    if (!shape.empty() && !extra_shape_[i].empty() && shape != extra_shape_[i]) return false;
  }
  if (!frame.module_names.empty() && !module_names_.empty() && frame.module_names != module_names_) return false;
  for (size_t j = 0; j < kIdArrays.size(); ++j) {
    const size_t n = (frame.*kIdArrays[j].field).size();
    if (n > 0 && id_length_[j] > 0 && n != id_length_[j]) return false;
  }
  if (have_layout_ && !frame.head_metrics.empty() &&
      (frame.layers != layers_ || frame.heads != heads_ || frame.weights != weights_))
    return false;
  if (!keeps_matrices(frame)) return true;
  for (const auto& m : frame.matrices) {
    const Series* s = find_series(chunk_tensor_name(m.layer, m.head, m.weight, m.tensor));
    if (s && (s->rows != m.rows || s->cols != m.cols || s->full_rows != m.full_rows || s->full_cols != m.full_cols))
      return false;
  }
  return true;
}

void ChunkBuilder::add(const Frame& frame, int64_t seq) {
  const bool probed = !frame.head_metrics.empty();
  if (probed && !have_layout_) {
    layers_ = frame.layers;
    heads_ = frame.heads;
    weights_ = frame.weights;
    have_layout_ = true;
    // Rows added before the first probed frame had no probes: fill their blocks with NaN.
    head_block_.assign(kinds_.size() * static_cast<size_t>(layers_ * heads_ * kHeadMetricCount), kNaN);
    weight_block_.assign(kinds_.size() * static_cast<size_t>(layers_ * heads_) * weights_.size() * kWeightMetricCount, kNaN);
  }
  for (size_t i = 0; i < ints_.size(); ++i) ints_[i].push_back(frame.*kIntColumns[i].field);
  for (size_t i = 0; i < reals_.size(); ++i) reals_[i].push_back(frame.*kRealColumns[i].field);
  seqs_.push_back(seq >= 0 ? seq : static_cast<int64_t>(kinds_.size()));
  timelines_.push_back(frame.timeline);
  kinds_.push_back(frame.kind == FrameKind::Train ? 0 : 1);
  has_probes_.push_back(probed ? 1 : 0);
  for (size_t i = 0; i < kExtraInts.size(); ++i) extra_ints_[i].push_back(frame.*kExtraInts[i].field);
  uint32_t mask = 0;
  for (size_t i = 0; i < kExtras.size(); ++i) {
    const auto& values = frame.*kExtras[i].field;
    const auto shape = extra_shape(frame, i);
    if (!shape.empty() && extra_shape_[i].empty()) {
      extra_shape_[i] = shape;  // rows before this one lacked it
      extra_values_[i].assign((kinds_.size() - 1) * values.size(), kNaN);
    }
    if (extra_shape_[i].empty()) continue;
    if (shape.empty()) {
      size_t n = 1;
      for (auto d : extra_shape_[i]) n *= static_cast<size_t>(d);
      extra_values_[i].insert(extra_values_[i].end(), n, kNaN);
    } else {
      mask |= 1u << i;
      extra_values_[i].insert(extra_values_[i].end(), values.begin(), values.end());
    }
  }
  for (size_t j = 0; j < kIdArrays.size(); ++j) {
    const auto& ids = frame.*kIdArrays[j].field;
    if (!ids.empty() && id_length_[j] == 0) {
      id_length_[j] = ids.size();
      id_values_[j].assign((kinds_.size() - 1) * ids.size(), -1);  // rows before this one lacked it
    }
    if (id_length_[j] == 0) continue;
    if (ids.empty()) {
      id_values_[j].insert(id_values_[j].end(), id_length_[j], -1);
    } else {
      mask |= 1u << (kExtras.size() + j);
      id_values_[j].insert(id_values_[j].end(), ids.begin(), ids.end());
    }
  }
  extras_.push_back(static_cast<int32_t>(mask));
  if (module_names_.empty() && !frame.module_grad_norm.empty()) module_names_ = frame.module_names;
  if (have_layout_) {
    const size_t h = static_cast<size_t>(layers_ * heads_ * kHeadMetricCount);
    const size_t w = static_cast<size_t>(layers_ * heads_) * weights_.size() * kWeightMetricCount;
    if (probed) {
      head_block_.insert(head_block_.end(), frame.head_metrics.begin(), frame.head_metrics.end());
      weight_block_.insert(weight_block_.end(), frame.weight_metrics.begin(), frame.weight_metrics.end());
    } else {
      head_block_.insert(head_block_.end(), h, kNaN);
      weight_block_.insert(weight_block_.end(), w, kNaN);
    }
  }
  if (keeps_matrices(frame)) {
    const auto row = static_cast<int32_t>(kinds_.size() - 1);
    size_t previous = 0;  // where the frame's previous snapshot sits, +1
    for (const auto& m : frame.matrices) {
      const std::string name = chunk_tensor_name(m.layer, m.head, m.weight, m.tensor);
      auto it = std::find_if(series_.begin(), series_.end(), [&](const Series& s) { return s.name == name; });
      if (it == series_.end())  // a new series goes right after the frame's previous one
        it = series_.insert(series_.begin() + static_cast<std::ptrdiff_t>(previous),
                            Series{name, m.layer, m.head, m.weight, m.tensor, m.rows, m.cols, m.full_rows, m.full_cols, {}, {}});
      it->at_rows.push_back(row);
      it->values.insert(it->values.end(), m.values.begin(), m.values.end());
      previous = static_cast<size_t>(it - series_.begin()) + 1;
    }
  }
}

void ChunkBuilder::clear() { *this = ChunkBuilder(config_); }

std::string ChunkBuilder::encode(const std::string& where, double wall_time,
                                 const std::map<std::string, std::string>& extra) const {
  const int64_t k = rows();
  std::vector<StBlob> blobs;
  for (size_t i = 0; i < ints_.size(); ++i) append(blobs, kIntColumns[i].name, StDtype::I64, ints_[i]);
  append(blobs, "seq", StDtype::I64, seqs_);
  append(blobs, "timeline", StDtype::I32, timelines_);
  append(blobs, "kind", StDtype::U8, kinds_);
  append(blobs, "has_probes", StDtype::U8, has_probes_);
  append(blobs, "extras", StDtype::I32, extras_);
  for (size_t i = 0; i < kExtraInts.size(); ++i) append(blobs, kExtraInts[i].name, StDtype::I32, extra_ints_[i]);
  for (size_t i = 0; i < kExtras.size(); ++i) {
    if (extra_shape_[i].empty()) continue;
    std::vector<int64_t> shape{k};
    shape.insert(shape.end(), extra_shape_[i].begin(), extra_shape_[i].end());
    blobs.push_back({kExtras[i].name, StDtype::F32, shape, extra_values_[i].data()});
  }
  for (size_t j = 0; j < kIdArrays.size(); ++j)
    if (id_length_[j] > 0)
      blobs.push_back({kIdArrays[j].name, StDtype::I64, {k, static_cast<int64_t>(id_length_[j])}, id_values_[j].data()});
  for (size_t i = 0; i < reals_.size(); ++i) append(blobs, kRealColumns[i].name, StDtype::F64, reals_[i]);

  // Metric series: the row-major blocks transposed into one [K] column per (layer, head, metric).
  std::vector<std::vector<float>> series;
  series.reserve(static_cast<size_t>(layers_ * heads_) * (kHeadMetricCount + weights_.size() * kWeightMetricCount));
  std::vector<std::string> names;
  auto transpose = [&](const std::vector<float>& block, size_t width, size_t index, std::string name) {
    std::vector<float> column(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) column[static_cast<size_t>(r)] = block[static_cast<size_t>(r) * width + index];
    series.push_back(std::move(column));
    names.push_back(std::move(name));
  };
  if (have_layout_) {
    const size_t hw = static_cast<size_t>(layers_ * heads_ * kHeadMetricCount);
    const size_t ww = static_cast<size_t>(layers_ * heads_) * weights_.size() * kWeightMetricCount;
    for (int l = 0; l < layers_; ++l)
      for (int h = 0; h < heads_; ++h) {
        const size_t lh = static_cast<size_t>(l * heads_ + h);
        for (int m = 0; m < kHeadMetricCount; ++m)
          transpose(head_block_, hw, lh * kHeadMetricCount + m,
                    chunk_tensor_name(l, h, "M", to_string(static_cast<HeadMetric>(m))));
        for (size_t w = 0; w < weights_.size(); ++w)
          for (int m = 0; m < kWeightMetricCount; ++m)
            transpose(weight_block_, ww, (lh * weights_.size() + w) * kWeightMetricCount + m,
                      chunk_tensor_name(l, h, weights_[w], to_string(static_cast<WeightMetric>(m))));
      }
  }
  for (size_t i = 0; i < series.size(); ++i) append(blobs, names[i], StDtype::F32, series[i]);

  // Snapshots, converted to the storage dtype.
  const StDtype mdtype = storage_dtype(config_.matrix_dtype);
  std::vector<std::vector<uint16_t>> narrow;
  narrow.reserve(series_.size());
  nlohmann::json snapshots = nlohmann::json::array();
  for (const Series& p : series_) {
    const void* data = p.values.data();
    if (mdtype != StDtype::F32) {
      std::vector<uint16_t> half(p.values.size());
      for (size_t i = 0; i < p.values.size(); ++i)
        half[i] = mdtype == StDtype::F16 ? float_to_half(p.values[i]) : float_to_bf16(p.values[i]);
      narrow.push_back(std::move(half));
      data = narrow.back().data();
    }
    blobs.push_back({p.name, mdtype, {static_cast<int64_t>(p.at_rows.size()), p.rows, p.cols}, data});
    append(blobs, p.name + ".row", StDtype::I32, p.at_rows);
    snapshots.push_back({{"name", p.name}, {"layer", p.layer}, {"head", p.head}, {"weight", p.weight},
                         {"tensor", p.tensor}, {"full_rows", p.full_rows}, {"full_cols", p.full_cols}});
  }
  std::map<std::string, std::string> metadata{
      {"format", kChunkFormat},
      {"first_step", std::to_string(first_step())},
      {"last_step", std::to_string(last_step())},
      {"rows", std::to_string(k)},
      {"wall_time", std::to_string(wall_time)},
      {"layers", std::to_string(layers_)},
      {"heads", std::to_string(heads_)},
      {"weights", nlohmann::json(weights_).dump()},
      {"snapshots", snapshots.dump()}};
  if (!module_names_.empty()) metadata["modules"] = nlohmann::json(module_names_).dump();
  if (wall_time < 0) metadata.erase("wall_time");
  for (const auto& [key, value] : extra) metadata[key] = value;
  return encode_safetensors(blobs, metadata, where);
}

void read_chunk_steps(const SafetensorsFile& file, std::vector<int64_t>& steps, std::vector<int32_t>& timelines,
                      std::vector<int64_t>* seqs) {
  const auto& meta = file.header().metadata;
  const auto format = meta.find("format");
  if (format == meta.end() || format->second != kChunkFormat)
    bad(file, std::string("not a memscope frames chunk (expected __metadata__ format ") + kChunkFormat + ")");
  const int64_t rows = metadata_int(file, "rows");
  if (rows < 0 || rows > (int64_t{1} << 31)) bad(file, "__metadata__ rows is out of range");
  steps = read_column<int64_t>(file, "step", StDtype::I64, rows);
  timelines = read_column<int32_t>(file, "timeline", StDtype::I32, rows);
  if (seqs) *seqs = read_column<int64_t>(file, "seq", StDtype::I64, rows);
}

std::vector<Frame> decode_chunk(const SafetensorsFile& file) {
  std::vector<int64_t> steps;
  std::vector<int32_t> timelines;
  read_chunk_steps(file, steps, timelines);
  const auto rows = static_cast<int64_t>(steps.size());
  std::vector<Frame> frames(steps.size());
  for (const auto& c : kIntColumns) {
    const auto column = read_column<int64_t>(file, c.name, StDtype::I64, rows);
    for (size_t r = 0; r < frames.size(); ++r) frames[r].*c.field = column[r];
  }
  for (const auto& c : kRealColumns) {
    const auto column = read_column<double>(file, c.name, StDtype::F64, rows);
    for (size_t r = 0; r < frames.size(); ++r) frames[r].*c.field = column[r];
  }
  const auto kinds = read_column<uint8_t>(file, "kind", StDtype::U8, rows);
  const auto probed = read_column<uint8_t>(file, "has_probes", StDtype::U8, rows);
  for (size_t r = 0; r < frames.size(); ++r) {
    if (kinds[r] > 1) bad(file, "tensor 'kind' holds " + std::to_string(kinds[r]) + " (0 train, 1 inspect)");
    if (probed[r] > 1) bad(file, "tensor 'has_probes' holds " + std::to_string(probed[r]) + " (0 or 1)");
    frames[r].timeline = timelines[r];
    frames[r].kind = kinds[r] == 0 ? FrameKind::Train : FrameKind::Inspect;
  }

  // Layout: bounded before it sizes anything, so a forged header cannot ask for huge buffers.
  const int64_t layers = metadata_int(file, "layers"), heads = metadata_int(file, "heads");
  if (layers < 0 || heads < 0 || layers > 4096 || heads > 4096) bad(file, "__metadata__ layers/heads out of range");
  const auto& meta = file.header().metadata;
  auto parse_json = [&](const char* key) {
    const auto it = meta.find(key);
    if (it == meta.end()) bad(file, std::string("__metadata__ has no '") + key + "'");
    auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_discarded() || !j.is_array()) bad(file, std::string("__metadata__['") + key + "'] is not a JSON array");
    return j;
  };
  std::vector<std::string> weights;
  for (const auto& w : parse_json("weights")) {
    if (!w.is_string()) bad(file, "__metadata__ weights must be strings");
    weights.push_back(w.get<std::string>());
  }
  if (weights.size() > 64) bad(file, "__metadata__ lists too many weights");
  const bool any_probed = std::find(probed.begin(), probed.end(), 1) != probed.end();
  if (any_probed && (layers == 0 || heads == 0 || weights.empty())) bad(file, "probed rows but no probe layout");
  if (any_probed) {
    const size_t lh = static_cast<size_t>(layers * heads);
    // Every metric series is a tensor of the file: a layout naming more than the file holds is
    // forged, and is refused before it sizes anything.
    if (lh * (kHeadMetricCount + weights.size() * kWeightMetricCountV1) > file.header().tensors.size())
      bad(file, "__metadata__ layout names more metric series than the file holds");
    std::vector<std::vector<float>> head_columns(lh * kHeadMetricCount), weight_columns(lh * weights.size() * kWeightMetricCount);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h) {
        const size_t i = static_cast<size_t>(l * heads + h);
        for (int m = 0; m < kHeadMetricCount; ++m)
          head_columns[i * kHeadMetricCount + m] = read_column<float>(
              file, chunk_tensor_name(l, h, "M", to_string(static_cast<HeadMetric>(m))), StDtype::F32, rows);
        for (size_t w = 0; w < weights.size(); ++w)
          for (int m = 0; m < kWeightMetricCount; ++m) {
            const std::string name = chunk_tensor_name(l, h, weights[w], to_string(static_cast<WeightMetric>(m)));
            auto& column = weight_columns[(i * weights.size() + w) * kWeightMetricCount + m];
            // The backward metrics came later: a session without them reads NaN there.
            if (m >= kWeightMetricCountV1 && !file.find(name)) column.assign(static_cast<size_t>(rows), kNaN);
            else column = read_column<float>(file, name, StDtype::F32, rows);
          }
      }
    for (size_t r = 0; r < frames.size(); ++r) {
      if (!probed[r]) continue;
      Frame& f = frames[r];
      f.layers = static_cast<int>(layers);
      f.heads = static_cast<int>(heads);
      f.weights = weights;
      f.head_metrics.resize(head_columns.size());
      f.weight_metrics.resize(weight_columns.size());
      for (size_t c = 0; c < head_columns.size(); ++c) f.head_metrics[c] = head_columns[c][r];
      for (size_t c = 0; c < weight_columns.size(); ++c) f.weight_metrics[c] = weight_columns[c][r];
    }
  }

  // HOPE's arrays: each row that has one gets its block back.
  // The mask was U8 while there were at most eight extra arrays.
  const StTensorInfo* mask_info = file.find("extras");
  std::vector<uint32_t> mask;
  if (mask_info && mask_info->dtype == StDtype::U8) {
    for (uint8_t m : read_column<uint8_t>(file, "extras", StDtype::U8, rows)) mask.push_back(m);
  } else {
    for (int32_t m : read_column<int32_t>(file, "extras", StDtype::I32, rows)) mask.push_back(static_cast<uint32_t>(m));
  }
  for (size_t i = 0; i < kExtraInts.size(); ++i) {
    const auto column = read_column<int32_t>(file, kExtraInts[i].name, StDtype::I32, rows);
    for (size_t r = 0; r < frames.size(); ++r) {
      if (column[r] < 0) bad(file, std::string("tensor '") + kExtraInts[i].name + "' holds a negative size");
      frames[r].*kExtraInts[i].field = column[r];
    }
  }
  std::vector<std::string> modules;  // the PerModule arrays' names
  if (meta.count("modules")) {
    for (const auto& m : parse_json("modules")) {
      if (!m.is_string()) bad(file, "__metadata__ modules must be strings");
      modules.push_back(m.get<std::string>());
    }
  }
  for (size_t i = 0; i < kExtras.size(); ++i) {
    const bool used = std::any_of(mask.begin(), mask.end(), [&](uint32_t m) { return (m >> i) & 1u; });
    if (!used) continue;
    const StTensorInfo* t = file.find(kExtras[i].name);
    if (!t || t->dtype != StDtype::F32 || t->shape.empty() || t->shape[0] != rows)
      bad(file, std::string("tensor '") + kExtras[i].name + "' should be F32 [rows, ...]");
    const auto bytes = file.read(*t);  // sizes checked by the reader against the shape
    const size_t per_row = rows > 0 ? bytes.size() / sizeof(float) / static_cast<size_t>(rows) : 0;
    const bool per_module = kExtras[i].layout == ExtraLayout::PerModule;
    if (per_module && per_row != modules.size())
      bad(file, std::string("tensor '") + kExtras[i].name + "' has " + std::to_string(per_row) +
                    " values per row but __metadata__ names " + std::to_string(modules.size()) + " modules");
    for (size_t r = 0; r < frames.size(); ++r) {
      if (!((mask[r] >> i) & 1u)) continue;
      auto& values = frames[r].*kExtras[i].field;
      if (per_module) frames[r].module_names = modules;
      values.resize(per_row);
      if (per_row) std::memcpy(values.data(), bytes.data() + r * per_row * sizeof(float), per_row * sizeof(float));
    }
  }

  for (size_t j = 0; j < kIdArrays.size(); ++j) {
    const uint32_t bit = 1u << (kExtras.size() + j);
    if (std::none_of(mask.begin(), mask.end(), [&](uint32_t m) { return (m & bit) != 0; })) continue;
    const StTensorInfo* t = file.find(kIdArrays[j].name);
    if (!t || t->dtype != StDtype::I64 || t->shape.size() != 2 || t->shape[0] != rows)
      bad(file, std::string("tensor '") + kIdArrays[j].name + "' should be I64 [rows, tokens]");
    const auto bytes = file.read(*t);
    const auto per_row = static_cast<size_t>(t->shape[1]);
    for (size_t r = 0; r < frames.size(); ++r) {
      if (!(mask[r] & bit)) continue;
      auto& ids = frames[r].*kIdArrays[j].field;
      ids.resize(per_row);
      if (per_row) std::memcpy(ids.data(), bytes.data() + r * per_row * sizeof(int64_t), per_row * sizeof(int64_t));
    }
  }

  // Snapshots, series by series in file order, which is each frame's own order.
  auto small_int = [](const nlohmann::json& v) {  // a non-negative integer that fits an int
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= std::numeric_limits<int>::max();
  };
  std::set<std::string> seen;
  for (const auto& s : parse_json("snapshots")) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string() || !s.contains("layer") ||
        !small_int(s["layer"]) || !s.contains("head") || !small_int(s["head"]) ||
        !s.contains("weight") || !s["weight"].is_string() || !s.contains("tensor") || !s["tensor"].is_string() ||
        !s.contains("full_rows") || !small_int(s["full_rows"]) || !s.contains("full_cols") ||
        !small_int(s["full_cols"]))
      bad(file, "__metadata__ snapshots entries need name, layer, head, weight, tensor, full_rows, full_cols "
                "(non-negative integers)");
    const std::string name = s["name"].get<std::string>();
    if (!seen.insert(name).second) bad(file, "__metadata__ snapshots lists " + st_quote(name) + " twice");
    const StTensorInfo* t = file.find(name);
    // Rows and columns bounded first: with Km = 0 the reader lets any shape through.
    if (!t || t->shape.size() != 3 || t->shape[1] > std::numeric_limits<int>::max() ||
        t->shape[2] > std::numeric_limits<int>::max() ||
        (t->dtype != StDtype::F32 && t->dtype != StDtype::F16 && t->dtype != StDtype::BF16))
      bad(file, "snapshot tensor " + st_quote(name) + " should be F32/F16/BF16 [Km, rows, cols]");
    const auto at_rows = read_column<int32_t>(file, name + ".row", StDtype::I32, t->shape[0]);
    for (int32_t r : at_rows)
      if (r < 0 || r >= rows) bad(file, "tensor " + st_quote(name + ".row") + " points past the chunk's rows");
    const auto bytes = file.read(*t);
    const size_t cells = static_cast<size_t>(t->shape[1]) * static_cast<size_t>(t->shape[2]);
    for (size_t i = 0; i < at_rows.size(); ++i) {
      MatrixSnapshot m;
      m.layer = s["layer"].get<int>();
      m.head = s["head"].get<int>();
      m.weight = s["weight"].get<std::string>();
      m.tensor = s["tensor"].get<std::string>();
      m.rows = static_cast<int>(t->shape[1]);
      m.cols = static_cast<int>(t->shape[2]);
      m.full_rows = s["full_rows"].get<int>();
      m.full_cols = s["full_cols"].get<int>();
      m.values.resize(cells);
      const unsigned char* base = bytes.data() + i * cells * st_dtype_size(t->dtype);
      if (t->dtype == StDtype::F32) {
        if (cells) std::memcpy(m.values.data(), base, cells * 4);
      } else {
        for (size_t c = 0; c < cells; ++c) {
          uint16_t bits;
          std::memcpy(&bits, base + 2 * c, 2);
          m.values[c] = t->dtype == StDtype::F16 ? half_to_float(bits) : bf16_to_float(bits);
        }
      }
      frames[static_cast<size_t>(at_rows[i])].matrices.push_back(std::move(m));
    }
  }
  return frames;
}

}  // namespace memscope::model
