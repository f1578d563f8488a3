// The storage formats under a session: f16/bf16 conversion against torch's, and safetensors files
// that round-trip every dtype bit for bit.
#include <torch/torch.h>

#include <random>

#include "model/session/half_float.h"
#include "model/session/safetensors_blob_writer.h"
#include "model/session/safetensors_reader.h"
#include "session/session_test_support.h"

using namespace memscope;
using namespace memscope::model;

namespace {

std::vector<float> awkward_floats() {
  std::vector<float> v{0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 6.1035156e-05f,
                       6.0e-05f, 5.96e-08f, 2.98e-08f, 2.99e-08f, 1e-10f, 3.0e38f, 1.17549435e-38f,
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  // Exact halfway cases of both formats, where round-to-nearest-even decides.
  for (uint32_t m = 0; m < 4096; ++m) {
    uint32_t half_tie = 0x38800000u + (m << 13) + 0x1000u, bf_tie = 0x3f800000u + (m << 16) + 0x8000u;
    float a, b;
    std::memcpy(&a, &half_tie, 4);
    std::memcpy(&b, &bf_tie, 4);
    v.push_back(a);
    v.push_back(b);
  }
  return v;
}

}  // namespace

TEST_CASE("f16 and bf16 conversions equal torch's, rounding ties to even", "[session]") {
  const auto values = awkward_floats();
  const auto t = torch::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(values.size())}).clone();
  const auto half = t.to(torch::kHalf).view(torch::kShort).contiguous();
  const auto bf16 = t.to(torch::kBFloat16).view(torch::kShort).contiguous();
  const auto half_back = t.to(torch::kHalf).to(torch::kFloat).contiguous();
  const auto bf16_back = t.to(torch::kBFloat16).to(torch::kFloat).contiguous();
  const auto* h = reinterpret_cast<const uint16_t*>(half.data_ptr<int16_t>());
  const auto* b = reinterpret_cast<const uint16_t*>(bf16.data_ptr<int16_t>());
  size_t half_bad = 0, bf_bad = 0, back_bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (float_to_half(values[i]) != h[i]) ++half_bad;
    if (float_to_bf16(values[i]) != b[i]) ++bf_bad;
    if (half_to_float(h[i]) != half_back.data_ptr<float>()[i]) ++back_bad;
    if (bf16_to_float(b[i]) != bf16_back.data_ptr<float>()[i]) ++back_bad;
  }
  CHECK(half_bad == 0);
  CHECK(bf_bad == 0);
  CHECK(back_bad == 0);
  // NaN stays NaN in both.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(half_to_float(float_to_half(nan))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(nan))));
}

TEST_CASE("safetensors round trip is exact for every dtype, F64 included", "[session]") {
  const auto dir = test::fresh_session_dir("dtypes");
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    StDtype dtype;
    std::vector<int64_t> shape;
    std::vector<unsigned char> bytes;
  };
  std::vector<Case> cases;
  for (StDtype d : {StDtype::F32, StDtype::F16, StDtype::BF16, StDtype::I32, StDtype::I64, StDtype::U8, StDtype::F64}) {
    Case c{d, {3, 5, 2}, {}};
    c.bytes.resize(30 * st_dtype_size(d));
    for (auto& b : c.bytes) b = static_cast<unsigned char>(byte(rng));  // any bit pattern, NaNs included
    cases.push_back(std::move(c));
  }
  cases.push_back({StDtype::F32, {0, 4}, {}});  // an empty tensor
  std::vector<StBlob> blobs;
  for (size_t i = 0; i < cases.size(); ++i)
    blobs.push_back({"t" + std::to_string(i) + "/" + st_dtype_name(cases[i].dtype), cases[i].dtype, cases[i].shape,
                     cases[i].bytes.data()});
  const auto path = dir / "all.safetensors";
  write_safetensors_blobs(path, blobs, {{"note", "every dtype"}, {"unicode", "ΔM ‖M‖"}});
  CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  const SafetensorsFile file(path.string());
  CHECK(file.header().metadata.at("unicode") == "ΔM ‖M‖");
  REQUIRE(file.header().tensors.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const StTensorInfo* t = file.find(blobs[i].name);
    REQUIRE(t);
    CHECK(t->dtype == cases[i].dtype);
    CHECK(t->shape == cases[i].shape);
    CHECK(file.read(*t) == cases[i].bytes);
  }
  // The data section starts 8-byte aligned, as numpy.frombuffer wants for every dtype.
  CHECK(file.header().data_start % 8 == 0);
}
