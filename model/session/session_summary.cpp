#include "model/session/session_summary.h"

#include <cmath>
#include <set>

#include "model/probe/frame_json.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

constexpr size_t kChunksSampled = 4;  // metrics "present" are judged on the first few chunks

}  // namespace

nlohmann::json session_summary(const SessionReader& session) {
  const SessionInfo& info = session.info();
  nlohmann::json j;
  j["path"] = session.dir().string();
  j["closed"] = info.closed;
  j["created"] = info.created;
  j["memscope_version"] = info.memscope_version;
  j["device"] = info.device;
  j["world_size"] = info.world_size;
  j["preset"] = info.preset_name;
  j["model"] = {{"block", info.block}, {"structure", info.structure}, {"layers", info.layers},
                {"memory_heads", info.memory_heads}, {"d_model", info.d_model}, {"vocab", info.vocab}};

  uint64_t bytes = 0;
  for (const auto& c : session.chunks()) bytes += c.bytes;
  j["frames"] = session.frame_count();
  j["chunks"] = session.chunks().size();
  j["bytes"] = bytes;
  // Readable chunks whose bytes matched their CRC32C, and those written before checksums.
  j["checksums"] = {{"verified", static_cast<int64_t>(session.chunks().size()) - session.unverified_chunks()},
                    {"unverified", session.unverified_chunks()}};
  nlohmann::json timelines = nlohmann::json::array();
  for (int t = 0; t < session.timelines(); ++t) {
    const auto steps = session.steps(t);
    timelines.push_back({{"timeline", t}, {"steps", steps.size()}, {"first_step", steps.empty() ? 0 : steps.front()},
                         {"last_step", steps.empty() ? 0 : steps.back()}});
  }
  j["timelines"] = timelines;

  // Layout and the metrics with at least one measured value, from the first chunks.
  int layers = 0, heads = 0;
  std::vector<std::string> weights;
  std::set<int> head_seen, weight_seen;
  nlohmann::json snapshots = nlohmann::json::object();
  int64_t probed = 0;
  // Every chunk is decoded once (inspect is the integrity check): a body that does not decode is
  // damage too. Metrics and snapshots are described from the first few.
  nlohmann::json undecodable = nlohmann::json::array();
  for (size_t c = 0; c < session.chunks().size(); ++c) {
    std::shared_ptr<const std::vector<Frame>> frames;
    try {
      frames = session.chunk_frames(c);
    } catch (const std::exception& e) {
      undecodable.push_back({{"file", session.chunks()[c].file}, {"bytes", session.chunks()[c].bytes}, {"reason", one_line(e.what())}});
      continue;
    }
    if (c >= kChunksSampled) continue;
    for (const Frame& f : *frames) {
      if (!f.head_metrics.empty()) {
        ++probed;
        layers = f.layers, heads = f.heads, weights = f.weights;
        for (size_t i = 0; i < f.head_metrics.size(); ++i)
          if (std::isfinite(f.head_metrics[i])) head_seen.insert(static_cast<int>(i % kHeadMetricCount));
        for (size_t i = 0; i < f.weight_metrics.size(); ++i)
          if (std::isfinite(f.weight_metrics[i])) weight_seen.insert(static_cast<int>(i % kWeightMetricCount));
      }
      for (const auto& m : f.matrices) {
        const std::string key = (m.weight == "M" ? "" : m.weight + "/") + m.tensor;
        auto& s = snapshots[key];
        if (s.is_null())
          s = {{"rows", m.rows}, {"cols", m.cols}, {"full_rows", m.full_rows}, {"full_cols", m.full_cols}, {"frames", 0}};
        s["frames"] = s["frames"].get<int64_t>() + (m.layer == 0 && m.head == 0 ? 1 : 0);
      }
    }
  }
  j["layers"] = layers;
  j["heads"] = heads;
  j["weights"] = weights;
  nlohmann::json head_metrics = nlohmann::json::array(), weight_metrics = nlohmann::json::array();
  for (int m : head_seen) head_metrics.push_back(to_string(static_cast<HeadMetric>(m)));
  for (int m : weight_seen) weight_metrics.push_back(to_string(static_cast<WeightMetric>(m)));
  j["head_metrics"] = head_metrics;
  j["weight_metrics"] = weight_metrics;
  j["snapshots"] = {{"dtype", to_string(info.record.matrix_dtype)}, {"tensors", snapshots}};
  j["sampled"] = {{"chunks", std::min(kChunksSampled, session.chunks().size())}, {"probed_frames", probed}};

  nlohmann::json by_kind = nlohmann::json::object();
  for (const Event& e : session.events()) {
    auto& n = by_kind[to_string(e.kind)];
    n = n.is_null() ? 1 : n.get<int64_t>() + 1;
  }
  j["events"] = {{"total", session.events().size()}, {"by_kind", by_kind}};

  nlohmann::json damage = nlohmann::json::array();
  for (const auto& d : session.damage()) damage.push_back({{"file", d.file}, {"bytes", d.bytes}, {"reason", d.reason}});
  for (const auto& d : undecodable) damage.push_back(d);
  j["damage"] = damage;
  const SessionLoss& loss = session.loss();
  j["lost"] = {{"frames", loss.frames_lost}, {"first_step", loss.first_step_lost}, {"last_step", loss.last_step_lost},
               {"bytes", loss.bytes_lost}, {"event_lines", loss.event_lines_skipped}};
  j["intact"] = damage.empty() && loss.frames_lost == 0 && loss.first_step_lost == 0 && info.closed;
  j["config"] = {{"preset_toml", info.preset_toml}, {"knobs", info.knobs}, {"record",
                 {{"matrix_dtype", to_string(info.record.matrix_dtype)}, {"matrix_every", info.record.matrix_every},
                  {"chunk_steps", info.record.chunk_steps}}}};
  return j;
}

nlohmann::json safetensors_summary(const std::string& path) {
  const SafetensorsFile file(path);
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t bytes = 0;
  for (const auto& t : file.header().tensors) {
    tensors.push_back({{"name", t.name}, {"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}});
    bytes += t.end - t.begin;
  }
  // "verified", "unverified" (no checksums: an older or foreign writer) or the failing tensors.
  nlohmann::json checksums = file.header().checksummed ? nlohmann::json("verified") : nlohmann::json("unverified");
  if (file.header().checksummed) {
    const auto bad = file.failing_checksums();
    if (!bad.empty()) checksums = {{"failing", bad}};
  }
  return {{"path", path}, {"tensors", tensors}, {"data_bytes", bytes}, {"checksums", checksums}, {"metadata_keys", [&] {
             nlohmann::json keys = nlohmann::json::array();
             for (const auto& [k, v] : file.header().metadata) keys.push_back(k);
             return keys;
           }()}};
}

}  // namespace memscope::model
