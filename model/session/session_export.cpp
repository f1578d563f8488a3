#include "model/session/session_export.h"

#include <cerrno>
#include <cstring>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "model/probe/frame_json.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_blob_writer.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

// What the last failing system call said; a stream keeps no reason of its own.
std::string reason_now() { return errno != 0 ? std::strerror(errno) : "reason unknown"; }

// Calls f(frame) for each frame of the range, in step order.
template <typename F>
int64_t for_each_frame(const SessionReader& session, const ExportRange& range, F&& f) {
  if (range.timeline < 0 || range.timeline >= session.timelines())
    throw UserError(session.dir().string() + ": no timeline " + std::to_string(range.timeline) + " (it has " +
                    std::to_string(session.timelines()) + ")");
  const std::vector<int64_t> steps = session.steps(range.timeline);
  int64_t n = 0;
  std::string warned;  // one warning per bad chunk, not per step
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i] < range.from || steps[i] > range.to) continue;
    std::optional<Frame> frame;
    try {
      frame = session.frame_at(range.timeline, i);
    } catch (const UserError& e) {
      // A chunk whose checksums held but whose body does not decode (a writer's bug, a forged
      // file): its frames are left out with a warning, never passed on, and the rest exported.
      const std::string message = one_line(e.what());
      if (message != warned) std::cerr << "memscope: warning: " << message << " (its frames are skipped)\n";
      warned = message;
      continue;
    }
    f(*frame);
    ++n;
  }
  return n;
}

[[noreturn]] void layout_changed(const std::filesystem::path& out, int64_t step) {
  throw UserError(out.string() + ": the probe layout changes at step " + std::to_string(step) +
                  " (the model or the snapshots changed shape); export each part with --from/--to");
}

std::string json_text(const SessionReader& session, int timeline) {
  nlohmann::json events = nlohmann::json::array();
  for (const Event& e : session.events())
    if (e.timeline == timeline) events.push_back(event_to_json(e));
  return events.dump();
}

uint64_t bytes_on_disk(const std::filesystem::path& p) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(p, ec);
  return ec ? 0 : size;
}

}  // namespace

ExportResult export_safetensors(const SessionReader& session, const std::filesystem::path& out, const ExportRange& range) {
  RecordConfig keep_all = session.info().record;
  keep_all.matrix_every = 1;  // the session already applied its cadence
  ChunkBuilder all(keep_all);
  ExportResult result;
  result.frames = for_each_frame(session, range, [&](const Frame& f) {
    if (!all.fits(f)) layout_changed(out, f.step);
    all.add(f);
  });
  if (result.frames == 0) throw UserError(session.dir().string() + ": no frames in the range to export");
  write_file_atomically(out, all.encode(out.string(), /*wall_time=*/-1,
                                        {{"session", session_info_json(session.info())},
                                         {"events", json_text(session, range.timeline)},
                                         {"timeline", std::to_string(range.timeline)}}));
  result.bytes = bytes_on_disk(out);
  return result;
}

ExportResult export_csv(const SessionReader& session, const std::filesystem::path& out, const ExportRange& range) {
  const std::string tmp = out.string() + ".tmp";
  errno = 0;
  std::ofstream csv(tmp, std::ios::trunc);
  if (!csv) throw UserError(out.string() + ": cannot open for writing (" + reason_now() + ")");
  const char* outer[] = {"step", "timeline", "kind", "train_step", "sequence", "token_index", "token", "target",
                         "predicted", "loss", "acc", "grad_norm", "lr", "tokens_per_s", "seconds"};
  bool header_written = false;
  int layers = -1, heads = -1;
  std::vector<std::string> weights;
  std::vector<Frame> waiting;
  char cell[40];
  auto number = [&](double v, const char* format) -> const char* {
    if (std::isnan(v)) return "";
    std::snprintf(cell, sizeof cell, format, v);
    return cell;
  };
  auto write_header = [&] {
    for (size_t i = 0; i < std::size(outer); ++i) csv << (i ? "," : "") << outer[i];
    for (int l = 0; l < std::max(layers, 0); ++l)
      for (int h = 0; h < heads; ++h) {
        for (int m = 0; m < kHeadMetricCount; ++m)
          csv << ',' << chunk_tensor_name(l, h, "M", to_string(static_cast<HeadMetric>(m)));
        for (const auto& w : weights)
          for (int m = 0; m < kWeightMetricCount; ++m)
            csv << ',' << chunk_tensor_name(l, h, w, to_string(static_cast<WeightMetric>(m)));
      }
    csv << '\n';
    header_written = true;
  };
  auto write_row = [&](const Frame& f) {
    csv << f.step << ',' << f.timeline << ',' << to_string(f.kind) << ',' << f.train_step << ',' << f.sequence << ','
        << f.token_index << ',' << f.token << ',' << f.target << ',' << f.predicted;
    for (double v : {f.loss, f.acc, f.grad_norm, f.lr, f.tokens_per_s, f.seconds}) csv << ',' << number(v, "%.17g");
    const size_t cells = static_cast<size_t>(std::max(layers, 0) * heads) * (kHeadMetricCount + weights.size() * kWeightMetricCount);
    if (f.head_metrics.empty()) {
      for (size_t i = 0; i < cells; ++i) csv << ',';
    } else {
      for (int l = 0; l < layers; ++l)
        for (int h = 0; h < heads; ++h) {
          for (int m = 0; m < kHeadMetricCount; ++m) csv << ',' << number(f.head(l, h, static_cast<HeadMetric>(m)), "%.9g");
          for (size_t w = 0; w < weights.size(); ++w)
            for (int m = 0; m < kWeightMetricCount; ++m)
              csv << ',' << number(f.weight(l, h, static_cast<int>(w), static_cast<WeightMetric>(m)), "%.9g");
        }
    }
    csv << '\n';
  };
  ExportResult result;
  result.frames = for_each_frame(session, range, [&](const Frame& f) {
    if (!f.head_metrics.empty()) {
      if (layers < 0) {
        layers = f.layers, heads = f.heads, weights = f.weights;
      } else if (f.layers != layers || f.heads != heads || f.weights != weights) {
        layout_changed(out, f.step);
      }
    }
    // The columns are known at the first probed frame; unprobed frames before it wait (few: probe.every).
    if (!header_written && layers < 0) {
      waiting.push_back(f);
      return;
    }
    if (!header_written) {
      write_header();
      for (const auto& w : waiting) write_row(w);
      waiting.clear();
    }
    write_row(f);
  });
  if (!header_written) {
    write_header();
    for (const auto& w : waiting) write_row(w);
  }
  csv.close();
  if (!csv) {
    const std::string why = reason_now();  // the failed write() left it, e.g. "No space left on device"
    std::remove(tmp.c_str());
    throw UserError(out.string() + ": write failed (" + why + ")");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0)
    throw UserError(out.string() + ": cannot rename the temporary file into place (" + reason_now() + ")");
  sync_directory_of(out);
  result.bytes = bytes_on_disk(out);
  return result;
}

}  // namespace memscope::model
