// The safetensors writer, read back here by hand (8-byte LE length, JSON header, raw data).
#include <catch2/catch.hpp>
#include <unistd.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/session/safetensors_writer.h"
#include "support/temp_files.h"

using namespace memscope::model;

TEST_CASE("safetensors writer: header, padding, offsets, dtypes and bytes", "[model][session]") {
  const auto dir = memscope::test::fresh_dir("st");
  const auto path = dir / "t.safetensors";
  torch::manual_seed(0);
  NamedTensors tensors{{"f32", torch::randn({2, 3})},
                       {"f64_as_f32", torch::randn({4}, torch::kFloat64)},
                       {"i64", torch::arange(5, torch::kLong)},
                       {"i32", torch::arange(3, torch::kInt)},
                       {"u8", torch::tensor({1, 2, 255}).to(torch::kByte)},
                       {"f16", torch::randn({3}).to(torch::kHalf)},
                       {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
                       {"empty", torch::zeros({0, 4})},
                       {"strided", torch::randn({4, 4}).t()}};
  write_safetensors(path, tensors, {{"rule", "{\"a\":1}"}, {"note", "x"}});
  CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["rule"] == "{\"a\":1}");
  const std::map<std::string, std::string> dtypes{{"f32", "F32"}, {"f64_as_f32", "F32"}, {"i64", "I64"},
                                                  {"i32", "I32"}, {"u8", "U8"},          {"f16", "F16"},
                                                  {"bf16", "BF16"}, {"empty", "F32"},    {"strided", "F32"}};
  uint64_t expected_offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const auto& entry = header[name];
    INFO(name);
    CHECK(entry["dtype"] == dtypes.at(name));
    CHECK(entry["shape"].get<std::vector<int64_t>>() == tensor.sizes().vec());
    const auto offsets = entry["data_offsets"].get<std::vector<uint64_t>>();
    CHECK(offsets[0] == expected_offset);
    expected_offset = offsets[1];
    torch::Tensor stored = tensor.scalar_type() == torch::kDouble ? tensor.to(torch::kFloat) : tensor.contiguous();
    const std::string data = bytes.substr(8 + n + offsets[0], offsets[1] - offsets[0]);
    REQUIRE(data.size() == static_cast<size_t>(stored.numel() * stored.element_size()));
    if (!data.empty()) CHECK(std::memcmp(data.data(), stored.data_ptr(), data.size()) == 0);  // empty: data_ptr is null
  }
  CHECK(8 + n + expected_offset == bytes.size());
  CHECK_THROWS(write_safetensors(path, {{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}));
  std::filesystem::remove_all(dir);
}
