// The fused probes (model/probe/fused_probes.cpp, issue 20) against the general path of
// collect_probes on the models the fused path takes: the same frame, metric for metric, with and
// without step records, snapshots and ΔM, and with a head gone NaN.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "model/config/preset.h"
#include "model/memory/memory_layer.h"
#include "model/nn/language_model.h"
#include "model/probe/fused_probes.h"
#include "model/probe/probe_collector.h"
#include "model/probe/snapshot_buffers.h"
#include "support/test_device.h"

namespace {

using namespace memscope::model;

struct Stepped {
  LanguageModel lm{nullptr};
  LmState state;
  std::vector<std::vector<at::Tensor>> before;
  LmStepOutput out;
};

// A 2-layer model of `memory` stepped 7 tokens (past demo windows' fill), keeping the memories
// before the last token, as the engine does.
// "preset set set…", for INFO.
std::string model_name(const std::string& preset, const std::vector<std::string>& sets) {
  std::string name = preset;
  for (const auto& s : sets) name += " " + s;
  return name;
}

Stepped step_seven(const std::string& memory, std::vector<std::string> sets) {
  torch::NoGradGuard no_grad;
  sets.insert(sets.begin(), {"model.d_model=32", "model.layers=2", "model.memory_heads=2", "model.attention_heads=2",
                             "model.window=4", "model.persistent=2", "memory.lr.max=4"});
  const Preset p = load_preset(memory, sets);
  LmConfig config = p.model;
  config.vocab = 13;
  torch::manual_seed(11);
  Stepped s;
  s.lm = LanguageModel(config, p.memory);
  s.state = s.lm->initial_state(1);
  for (int64_t t = 0; t < 7; ++t) {
    s.before.clear();
    for (const auto& b : s.state.blocks) s.before.push_back(b.memory.memory);
    s.out = s.lm->step(torch::full({1}, (t * 5) % 13, torch::kLong), s.state);
  }
  return s;
}

// Equal where both are numbers (to float rounding of another summation order), NaN and Inf in the
// same places.
void check_same(const std::vector<float>& fused, const std::vector<float>& general, double tolerance) {
  REQUIRE(fused.size() == general.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("element " << i << ": fused " << fused[i] << ", general " << general[i]);
    REQUIRE(std::isnan(fused[i]) == std::isnan(general[i]));
    if (!std::isnan(fused[i]) && fused[i] != general[i])  // an Inf only equals itself
      CHECK(std::abs(fused[i] - general[i]) <= tolerance * (1.0 + std::abs(general[i])));
  }
}

void check_frames_equal(const ProbeInputs& in) {
  const ProbeConfig config;
  REQUIRE(fused_probes_apply(in, config));
  Frame fused, general;
  const auto fused_extra = collect_fused_probes(fused, in);
  const auto general_extra = collect_probes_general(general, in, config);
  CHECK(fused_extra == general_extra);
  CHECK(fused.layers == general.layers);
  CHECK(fused.heads == general.heads);
  CHECK(fused.weights == general.weights);
  check_same(fused.head_metrics, general.head_metrics, 1e-5);
  check_same(fused.weight_metrics, general.weight_metrics, 1e-4);
  REQUIRE(fused.matrices.size() == general.matrices.size());
  for (size_t i = 0; i < fused.matrices.size(); ++i) {
    const MatrixSnapshot &a = fused.matrices[i], &b = general.matrices[i];
    INFO("snapshot " << i << ": " << b.tensor << " layer " << b.layer << " head " << b.head);
    CHECK(a.layer == b.layer);
    CHECK(a.head == b.head);
    CHECK(a.weight == b.weight);
    CHECK(a.tensor == b.tensor);
    CHECK(a.rows == b.rows);
    CHECK(a.cols == b.cols);
    CHECK(a.full_rows == b.full_rows);
    CHECK(a.full_cols == b.full_cols);
    check_same(a.values, b.values, 1e-6);
    CHECK(a.singular_values.empty());
  }
  CHECK(fused.cms_levels == general.cms_levels);
  CHECK(fused.feature_rows == general.feature_rows);
}

}  // namespace

TEST_CASE("fused probes equal the general path: Muon, gd with momentum, dgd, retention off, windows, MLP memories", "[probe]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> models{
      {"atlas-linear", {}},                                  // Muon, an Omega window, polynomial features
      {"atlas-linear", {"memory.window.c=1"}},
      {"deltanet", {"memory.optimiser=dgd"}},               // dgd's effective retention α − wη‖φ‖²
      {"deltanet", {}},
      {"titans-lmm", {"memory.structure=linear"}},          // gd with momentum, the conv
      {"titans-lmm", {"memory.structure=linear", "memory.retention=none"}},
      {"titans-lmm", {"memory.structure=linear", "memory.bias=huber"}},  // the general step's record
      {"titans-lmm", {}},                                   // MLP memory (W1, W2): gd with momentum
      {"atlas", {}},                                        // MLP memory under Muon, an Omega window
      {"atlas", {"memory.window.c=1", "memory.retention=none"}},
  };
  for (const auto& [memory, sets] : models) {
    INFO(model_name(memory, sets));
    Stepped s = step_seven(memory, sets);
    ProbeInputs in;
    in.model = &s.lm;
    in.state = &s.state;
    in.extra = {torch::tensor(2.5), torch::tensor(-1.25)};
    SECTION("an inspect frame: records, ΔM and snapshots") {
      in.records = &s.out.records;
      in.memory_before = &s.before;
      in.matrices = true;
      check_frames_equal(in);
      // With the engine's snapshot buffers: the first frame's made as it goes, the second's ahead.
      SnapshotBuffers buffers;
      in.snapshot_buffers = &buffers;
      check_frames_equal(in);
      buffers.prepare(1);
      CHECK(buffers.ready() > 0);
      check_frames_equal(in);
      CHECK(buffers.ready() == 0);
    }
    SECTION("a train frame: no records, no ΔM, no snapshots") { check_frames_equal(in); }
    SECTION("a head gone NaN in M, another in S") {
      s.state.blocks[1].memory.memory[0][0][1][2][3] = std::nan("");
      s.state.blocks[0].memory.momentum[0][0][0][0][0] = std::numeric_limits<double>::infinity();
      // And one in an MLP's second weight, W2 [4d,d]: a tall matrix's spectrum.
      if (s.state.blocks[0].memory.memory.size() > 1)
        s.state.blocks[0].memory.memory[1][0][2][5][1] = std::nan("");
      // The records' sums of S² and ΔM² (the fused MLP step's) describe the state their step left,
      // not this one edited since: without them the fused probes read S and M_{t−1} themselves.
      for (auto& record : s.out.records)
        if (record) record->weight_squares.clear();
      in.records = &s.out.records;
      in.memory_before = &s.before;
      in.matrices = true;
      check_frames_equal(in);
    }
  }
}

TEST_CASE("the fused steps' records sum S_t² and (M_t − M_{t−1})² of every weight as the tensors do",
          "[probe]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // the fused steps are CPU code
  const std::vector<std::pair<std::string, std::vector<std::string>>> models{
      {"titans-lmm", {}},  // the fused MLP step: gd with momentum
      {"atlas", {}},       // and Muon, an Omega window
      // The fused linear step (fused_linear_step.cpp): gd with momentum.
      {"titans-lmm", {"memory.structure=linear", "memory.feature_map.kind=identity"}},
      // The fused window step (fused_window_step.cpp): Atlas's linear memory, as demo-mqar's.
      {"atlas", {"memory.structure=linear", "memory.window.c=4"}},
  };
  for (const auto& [memory, sets] : models) {
    INFO(model_name(memory, sets));
    torch::manual_seed(5);
    MemoryLayer layer(load_preset(memory, sets).memory, MemoryLayerOptions{32, 2, 0});
    layer->set_fused_step(true);
    torch::NoGradGuard no_grad;
    const int64_t B = 2, H = 2, weights = static_cast<int64_t>(layer->initial_state(1).memory.size());
    const at::Tensor x = torch::randn({B, 5, 32});
    MemoryState state = layer->initial_state(B);
    for (int64_t t = 0; t < 5; ++t) {
      const std::vector<at::Tensor> before = state.memory;
      const StepOutput out =
          layer->step(x.select(1, t), state, 1, t % 2 ? StepDetail::Record : StepDetail::RecordLater);
      const std::vector<double>& squares = out.record.weight_squares;
      REQUIRE(squares.size() == static_cast<size_t>(B * H * weights * 2));  // [B,H,weights,2]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < weights; ++w) {
            const at::Tensor s = state.momentum[w][b][h].to(at::kDouble);
            const at::Tensor change = state.memory[w][b][h].to(at::kDouble) - before[w][b][h].to(at::kDouble);
            const double* sums = squares.data() + ((b * H + h) * weights + w) * 2;
            CHECK(sums[0] == Approx((s * s).sum().item<double>()).epsilon(1e-12));
            CHECK(sums[1] == Approx((change * change).sum().item<double>()).epsilon(1e-12));
            CHECK(sums[1] > 0);
          }
    }
    // Unprobed, the step sums nothing.
    CHECK(layer->step(x.select(1, 0), state, 1, StepDetail::OutputOnly).record.weight_squares.empty());
  }
}

TEST_CASE("fused probes leave to the general path what they do not take", "[probe]") {
  const ProbeConfig config;
  for (const auto& [memory, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"titans-lmm", {"memory.optimiser=dgd"}},                              // dgd on an MLP memory
           {"deltanet", {"memory.optimiser=dgd", "memory.dgd.per_feature=true"}},  // per-feature dgd
       }) {
    INFO(memory);
    Stepped s = step_seven(memory, sets);
    ProbeInputs in;
    in.model = &s.lm;
    in.state = &s.state;
    CHECK_FALSE(fused_probes_apply(in, config));
  }
  // Snapshots that would be shrunk for display go the general way (it keeps their full spectra).
  Stepped s = step_seven("atlas-linear", {});
  ProbeInputs in;
  in.model = &s.lm;
  in.state = &s.state;
  in.matrices = true;
  ProbeConfig small = config;
  small.downsample = 4;
  CHECK_FALSE(fused_probes_apply(in, small));
  small.full_matrices = true;
  CHECK(fused_probes_apply(in, small));
}

TEST_CASE("snapshot buffers: made ahead to what the last snapshot frame took, over the frames up to the next",
          "[probe]") {
  SnapshotBuffers buffers;
  buffers.prepare(3);  // nothing taken yet: nothing to make
  CHECK(buffers.ready() == 0);
  // A snapshot frame takes six buffers of 4 and three of 9: all new, all zeros.
  for (int i = 0; i < 6; ++i) CHECK(buffers.take(4) == std::vector<float>(4, 0.0f));
  for (int i = 0; i < 3; ++i) CHECK(buffers.take(9).size() == 9);
  buffers.frame_done();
  // Nine missing over three frames: three a frame, then nothing more.
  buffers.prepare(3);
  CHECK(buffers.ready() == 3);
  buffers.prepare(2);
  CHECK(buffers.ready() == 6);
  buffers.prepare(1);
  CHECK(buffers.ready() == 9);
  buffers.prepare(1);
  CHECK(buffers.ready() == 9);
  // Taken back by size, written over by the caller, and the next frame takes fresh zeros again.
  std::vector<float> a = buffers.take(9);
  CHECK(a == std::vector<float>(9, 0.0f));
  CHECK(buffers.ready() == 8);
  // A frame that takes a size not made (another model) gets a new buffer, and frame_done keeps only
  // what that frame took: one 9 of the two left, none of the 4s.
  CHECK(buffers.take(5).size() == 5);
  buffers.frame_done();
  CHECK(buffers.ready() == 1);
  buffers.prepare(10);  // the missing 5: one at least, however many frames are left
  CHECK(buffers.ready() == 2);
  buffers.prepare(1);
  CHECK(buffers.ready() == 2);
}
