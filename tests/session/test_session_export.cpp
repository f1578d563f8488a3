// export (issue 6): one safetensors file with a leading step axis and the session in
// __metadata__, readable from Python with json and numpy alone; and every scalar series as CSV.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/session/safetensors_reader.h"
#include "model/session/frame_chunk.h"
#include "model/session/session_export.h"
#include "model/session/session_reader.h"
#include "session/session_test_support.h"
#include "support/run_process.h"

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

struct Recorded {
  std::filesystem::path dir;
  std::vector<Frame> frames;
  std::vector<Event> events;
};

Recorded record_run(const std::string& name, int steps, std::vector<std::string> sets = {}) {
  Recorded r;
  r.dir = test::fresh_session_dir(name) / "run.memscope";
  sets.push_back("record.chunk_steps=6");
  const auto log = test::record_session(test::small_engine(sets), r.dir, {Command::steps(steps)});
  r.frames = log->frames;
  r.events = log->events;
  return r;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

}  // namespace

TEST_CASE("export merges the chunks into one file with a leading step axis", "[session]") {
  const auto run = record_run("export", 20);
  const SessionReader session(run.dir.string());
  const auto out = run.dir.parent_path() / "all.safetensors";
  const auto result = export_safetensors(session, out);
  CHECK(result.frames == 20);

  const SafetensorsFile file(out.string());
  CHECK(file.find("loss")->shape == std::vector<int64_t>{20});
  CHECK(file.find("layer1/head1/erank")->shape == std::vector<int64_t>{20});
  CHECK(file.find("layer0/head0/M")->shape == std::vector<int64_t>{10, 8, 8});  // probe.matrices_every=2
  const auto info = parse_session_info(file.header().metadata.at("session"), "export");
  CHECK(info.preset_name == "demo-mqar");
  CHECK(nlohmann::json::parse(file.header().metadata.at("events")).is_array());
  // The values are the live ones (the export is itself a chunk, so the chunk decoder reads it).
  const auto frames = decode_chunk(file);
  REQUIRE(frames.size() == run.frames.size());
  for (size_t i = 0; i < frames.size(); ++i) CHECK(test::identical_frames(frames[i], run.frames[i]));

  // A range exports part of it.
  ExportRange range;
  range.from = 5;
  range.to = 9;
  CHECK(export_safetensors(session, out, range).frames == 5);
  CHECK(SafetensorsFile(out.string()).find("step")->shape == std::vector<int64_t>{5});
}

TEST_CASE("python3 reads an export with json and numpy.frombuffer alone", "[session]") {
  const auto run = record_run("python", 12);
  const auto out = run.dir.parent_path() / "py.safetensors";
  export_safetensors(SessionReader(run.dir.string()), out);
  const auto py = test::run_process({"/usr/bin/python3", MEMSCOPE_SOURCE_DIR "/tests/session/read_export.py", out.string()});
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  const auto j = nlohmann::json::parse(py.output);
  REQUIRE(j["steps"].size() == 12);
  size_t matrix_frame = 0;
  for (size_t i = 0; i < 12; ++i) {
    const Frame& f = run.frames[i];
    CHECK(j["steps"][i].get<int64_t>() == f.step);
    if (std::isnan(f.loss)) CHECK(j["loss"][i].is_null());
    else CHECK(j["loss"][i].get<double>() == f.loss);  // F64: exact
    CHECK(j["erank"][i].get<double>() == static_cast<double>(f.weight(1, 0, 0, WeightMetric::Erank)));
    if (!f.matrices.empty() && matrix_frame == 0) matrix_frame = i;
  }
  CHECK(j["norm_M_shape"] == nlohmann::json::array({12}));
  CHECK(j["M_shape"] == nlohmann::json::array({6, 8, 8}));
  CHECK(j["matrix_row"][0].get<size_t>() == matrix_frame);
  // layer0/head1/M of the first snapshot frame, value for value.
  const Frame& f = run.frames[matrix_frame];
  const MatrixSnapshot* m = nullptr;
  for (const auto& s : f.matrices)
    if (s.layer == 0 && s.head == 1 && s.tensor == "M") m = &s;
  REQUIRE(m);
  REQUIRE(j["M_first"].size() == m->values.size());
  for (size_t i = 0; i < m->values.size(); ++i) CHECK(j["M_first"][i].get<double>() == static_cast<double>(m->values[i]));
  CHECK(j["preset"] == "demo-mqar");
  CHECK(j["events"].get<size_t>() > 0);
}

TEST_CASE("export --csv writes every scalar series as a column, one row per step", "[session]") {
  const auto run = record_run("csv", 10, {"probe.every=2"});
  const auto out = run.dir.parent_path() / "all.csv";
  CHECK(export_csv(SessionReader(run.dir.string()), out).frames == 10);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  // 15 outer columns + 2 layers x 2 heads x (9 head metrics + 11 weight metrics, the last three
  // the backward norms of a stepped-into training step).
  REQUIRE(header.size() == 15 + 4 * 20);
  CHECK(header[0] == "step");
  CHECK(header[9] == "loss");
  const auto erank = std::find(header.begin(), header.end(), "layer1/head0/erank") - header.begin();
  REQUIRE(erank < static_cast<long>(header.size()));
  for (const Frame& f : run.frames) {
    REQUIRE(std::getline(in, line));
    const auto cells = split(line);
    REQUIRE(cells.size() == header.size());
    CHECK(std::stoll(cells[0]) == f.step);
    if (f.head_metrics.empty()) {
      CHECK(cells[static_cast<size_t>(erank)].empty());  // probe.every=2: not measured
    } else {
      CHECK(std::stof(cells[static_cast<size_t>(erank)]) == f.weight(1, 0, 0, WeightMetric::Erank));
    }
  }
  CHECK_FALSE(std::getline(in, line));
}
