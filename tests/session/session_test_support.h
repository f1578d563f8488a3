// Shared by the session tests: a fresh directory per test, an engine run that records, and frame
// comparison that covers every field a session stores.
#pragma once
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "engine/engine_test_support.h"
#include "model/probe/frame.h"
#include "support/temp_files.h"

namespace memscope::test {

// Runs `commands` on a new engine with a recording to `dir` from the first to the last; returns
// every frame and event the engine emitted.
inline std::shared_ptr<FrameLog> record_session(const model::EngineOptions& options, const std::filesystem::path& dir,
                                                const std::vector<model::Command>& commands) {
  model::Engine engine(options);
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(model::Command::start_recording(dir.string()));
  for (const auto& c : commands) engine.post(c);
  engine.post(model::Command{model::Command::Kind::StopRecording});
  engine.wait_idle();
  INFO("engine error: " << engine.status().last_error);
  REQUIRE(engine.status().last_error.empty());
  return log;
}

// An empty directory under /tmp, unique to this process and `name`, removed at exit.
inline std::filesystem::path fresh_session_dir(const std::string& name) { return fresh_dir("session-" + name); }

// Every stored field bit for bit, wall-clock fields and snapshot shapes included.
inline bool identical_frames(const model::Frame& a, const model::Frame& b) {
  if (!same_frame(a, b) || a.timeline != b.timeline || !same_double(a.seconds, b.seconds) ||
      !same_double(a.tokens_per_s, b.tokens_per_s) || a.layers != b.layers || a.heads != b.heads || a.weights != b.weights)
    return false;
  // HOPE's arrays (issue 8).
  if (a.cms_levels != b.cms_levels || a.feature_rows != b.feature_rows || a.feature_dim != b.feature_dim ||
      !same_floats(a.cms_norm, b.cms_norm) || !same_floats(a.cms_tick, b.cms_tick) ||
      !same_floats(a.selfmod_error, b.selfmod_error) ||
      !same_floats(a.selfmod_retention, b.selfmod_retention) || !same_floats(a.retain_feature, b.retain_feature) ||
      !same_floats(a.lr_feature, b.lr_feature))
    return false;
  // Train frames' batch row (the train view).
  if (a.batch_tokens != b.batch_tokens || a.batch_targets != b.batch_targets || !same_floats(a.batch_loss, b.batch_loss))
    return false;
  for (size_t i = 0; i < a.matrices.size(); ++i) {
    const auto &x = a.matrices[i], &y = b.matrices[i];
    if (x.layer != y.layer || x.head != y.head || x.weight != y.weight || x.tensor != y.tensor || x.rows != y.rows ||
        x.cols != y.cols || x.full_rows != y.full_rows || x.full_cols != y.full_cols)
      return false;
  }
  return true;
}

}  // namespace memscope::test
