// memscope-cli memory-trace, run as a real process for every preset; the file is parsed here
// by hand (independently of the model's safetensors writer) and the recurrence spot-checked.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include "support/run_process.h"
#include "support/temp_files.h"

using memscope::test::run_process;

namespace {

struct StoredTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
  float at(std::initializer_list<int64_t> index) const {
    int64_t flat = 0, k = 0;
    for (int64_t i : index) flat = flat * shape[k++] + i;
    return values.at(flat);
  }
};

struct SafetensorsFile {
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, std::string> metadata;
};

SafetensorsFile read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  REQUIRE(8 + n <= bytes.size());
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  SafetensorsFile file;
  uint64_t end = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      file.metadata = it.value().get<std::map<std::string, std::string>>();
      continue;
    }
    StoredTensor t;
    t.dtype = it.value()["dtype"];
    t.shape = it.value()["shape"].get<std::vector<int64_t>>();
    auto offsets = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    int64_t count = 1;
    for (auto s : t.shape) count *= s;
    REQUIRE(t.dtype == "F32");
    REQUIRE(offsets[1] - offsets[0] == static_cast<uint64_t>(count) * 4);
    REQUIRE(8 + n + offsets[1] <= bytes.size());
    t.values.resize(count);
    std::memcpy(t.values.data(), bytes.data() + 8 + n + offsets[0], count * 4);
    end = std::max(end, offsets[1]);
    file.tensors[it.key()] = std::move(t);
  }
  CHECK(8 + n + end == bytes.size());
  return file;
}

std::string temp_path(const std::string& name) {
  static const auto dir = memscope::test::fresh_dir("trace");  // one per process, removed at exit
  return (dir / name).string();
}

}  // namespace

TEST_CASE("memory-trace writes the issue's tensors for every preset", "[cli]") {
  const int64_t T = 10, H = 2, D = 8, d = D / H;
  for (std::string preset : {"titans-lmm", "atlas", "omeganet", "atlas-linear", "deltanet", "ttt-linear", "hebbian",
                             "moneta", "yaad", "memora"}) {
    for (std::string chunk : {"", "4"}) {
      const std::string out = temp_path(preset + chunk + ".safetensors");
      std::vector<std::string> args{MEMSCOPE_CLI_BINARY, "memory-trace", "--preset", preset, "--tokens",
                                    std::to_string(T), "--heads", std::to_string(H), "--dim", std::to_string(D),
                                    "--seed", "3", "--out", out};
      if (!chunk.empty()) args.insert(args.end(), {"--chunk", chunk});
      auto result = run_process(args);
      INFO("preset " << preset << " chunk '" << chunk << "' output " << result.output);
      REQUIRE(result.exit_code == 0);
      SafetensorsFile file = read_file(out);

      auto rule = nlohmann::json::parse(file.metadata.at("rule"));
      CHECK(rule["name"] == preset);
      const bool mlp = rule["memory"]["structure"] == "mlp";
      const int64_t c = rule["memory"]["window"]["c"];
      const int64_t dphi = d;  // no preset uses the tensor2 map

      std::set<std::string> expected{"phi_k", "phi_q", "v", "retain", "lr", "momentum", "gamma", "y",
                                     "loss_before", "loss_after"};
      if (mlp) expected.insert({"W1", "W2", "S_W1", "S_W2"});
      else expected.insert({"M", "S"});
      if (preset == "moneta") expected.insert("A");
      if (preset == "yaad") expected.insert("delta");
      std::set<std::string> names;
      for (const auto& [name, t] : file.tensors) names.insert(name);
      CHECK(names == expected);

      auto shape = [&](const std::string& n) { return file.tensors.at(n).shape; };
      CHECK(shape("phi_k") == std::vector<int64_t>{T, H, dphi});
      CHECK(shape("phi_q") == std::vector<int64_t>{T, H, dphi});
      CHECK(shape("v") == std::vector<int64_t>{T, H, d});
      for (const char* gate : {"retain", "lr", "momentum", "loss_before", "loss_after"})
        CHECK(shape(gate) == std::vector<int64_t>{T, H});
      CHECK(shape("gamma") == std::vector<int64_t>{T, H, c});
      CHECK(shape("y") == std::vector<int64_t>{T, H, d});
      if (mlp) {
        CHECK(shape("W1") == std::vector<int64_t>{T + 1, H, d, 4 * d});
        CHECK(shape("W2") == std::vector<int64_t>{T + 1, H, 4 * d, d});
        CHECK(shape("S_W1") == shape("W1"));
      } else {
        CHECK(shape("M") == std::vector<int64_t>{T + 1, H, d, dphi});
        CHECK(shape("S") == shape("M"));
        // Read after write: y_t = M_t φ(q_t), with M_t at index t + 1.
        const auto &M = file.tensors.at("M"), &q = file.tensors.at("phi_q"), &y = file.tensors.at("y");
        double worst = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < d; ++i) {
              double acc = 0;
              for (int64_t j = 0; j < dphi; ++j) acc += M.at({t + 1, h, i, j}) * q.at({t, h, j});
              worst = std::max(worst, std::abs(acc - y.at({t, h, i})));
            }
        CHECK(worst < 1e-4);
      }
      // γ is 0 for window positions before the start: token 0 has only its own (newest) slot.
      for (int64_t j = 0; j + 1 < c; ++j) CHECK(file.tensors.at("gamma").at({0, 0, j}) == 0.0f);
    }
  }
}

TEST_CASE("memory-trace of deltanet and gated-deltanet (dgd) recomputes from its own tensors", "[cli]") {
  for (const std::string preset : {"deltanet", "gated-deltanet"}) {
  INFO(preset);
  const int64_t T = 12, H = 2, D = 8, d = D / H;
  const std::string out = temp_path(preset + "-check.safetensors");
  auto result = run_process({MEMSCOPE_CLI_BINARY, "memory-trace", "--preset", preset, "--set", "memory.lr.max=20",
                             "--tokens", std::to_string(T), "--heads", std::to_string(H), "--dim", std::to_string(D),
                             "--seed", "5", "--out", out});
  REQUIRE(result.exit_code == 0);
  SafetensorsFile f = read_file(out);
  const auto &M = f.tensors.at("M"), &k = f.tensors.at("phi_k"), &v = f.tensors.at("v");
  const auto &alpha = f.tensors.at("retain"), &eta = f.tensors.at("lr");
  double worst = 0, moved = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < d; ++i) {
        // Gated delta rule: M_t = α M_{t−1} − η (M_{t−1} k − v) kᵀ
        double err = -v.at({t, h, i});
        for (int64_t j = 0; j < d; ++j) err += M.at({t, h, i, j}) * k.at({t, h, j});
        for (int64_t j = 0; j < d; ++j) {
          const double expected = alpha.at({t, h}) * M.at({t, h, i, j}) - eta.at({t, h}) * err * k.at({t, h, j});
          worst = std::max(worst, std::abs(expected - M.at({t + 1, h, i, j})));
          moved = std::max<double>(moved, std::abs(M.at({t + 1, h, i, j}) - M.at({t, h, i, j})));
        }
      }
  CHECK(worst < 1e-5);
  CHECK(moved > 1e-3);
  }
}

TEST_CASE("memory-trace: a bad preset or knob gives one clear line and a non-zero exit", "[cli]") {
  const std::string out = temp_path("bad.safetensors");
  for (auto extra : std::vector<std::vector<std::string>>{
           {"--preset", "no-such-preset"},
           {"--preset", "atlas", "--set", "memory.window.c=0"},
           {"--preset", "atlas", "--set", "bogus.key=1"},
           {"--preset", "atlas", "--set", "memory.bias=l7"},
           {"--preset", "atlas", "--dim", "7", "--heads", "2"},
           {"--preset", "atlas", "--tokens", "many"},
       }) {
    std::vector<std::string> args{MEMSCOPE_CLI_BINARY, "memory-trace", "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    auto result = run_process(args);
    INFO("args: " << extra.back() << "\noutput: " << result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.exit_code < 128);
    CHECK(memscope::test::count_lines(result.output) == 1);
    CHECK_THAT(result.output, Catch::StartsWith("memscope-cli: "));
  }
}

TEST_CASE("memory-trace of a HOPE preset holds each CMS level's weights and update ticks", "[cli]") {
  const int64_t T = 10, D = 8;
  const std::string out = temp_path("hope-cms.safetensors");
  auto result = run_process({MEMSCOPE_CLI_BINARY, "memory-trace", "--preset", "hope-cms-only", "--set",
                             "model.cms.periods=1,4", "--tokens", std::to_string(T), "--heads", "2", "--dim",
                             std::to_string(D), "--seed", "3", "--out", out});
  REQUIRE(result.exit_code == 0);
  SafetensorsFile f = read_file(out);
  for (int64_t l = 0; l < 2; ++l) {
    const int64_t period = l == 0 ? 1 : 4;
    const std::string level = "cms_level" + std::to_string(l) + "/";
    const StoredTensor &w1 = f.tensors.at(level + "W1"), &w2 = f.tensors.at(level + "W2"), &tick = f.tensors.at(level + "tick");
    CHECK(w1.shape == std::vector<int64_t>{T + 1, D, 4 * D});
    CHECK(w2.shape == std::vector<int64_t>{T + 1, 4 * D, D});
    CHECK(tick.shape == std::vector<int64_t>{T});
    for (int64_t t = 0; t < T; ++t) {
      const bool ticks = (t + 1) % period == 0;
      CAPTURE(l, t);
      CHECK(tick.at({t}) == (ticks ? 1.0f : 0.0f));
      double moved = 0;
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < 4 * D; ++j) moved = std::max<double>(moved, std::abs(w1.at({t + 1, i, j}) - w1.at({t, i, j})));
      if (ticks) CHECK(moved > 0);
      else CHECK(moved == 0);
    }
  }
  CHECK(f.tensors.count("M") == 1);  // the memory layer's trace is still there
  CHECK(f.tensors.count("retain_feature") == 1);
}

