// Our writer and our reader agree, byte for byte, for every dtype the format takes.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>
#include <unistd.h>

#include "model/session/safetensors_reader.h"
#include "model/session/safetensors_writer.h"

using namespace memscope::model;

TEST_CASE("safetensors round trip is exact for F32, F16, BF16, I32, I64 and U8", "[session]") {
  torch::manual_seed(9);
  const NamedTensors tensors = {
      {"layer0/head0/M", torch::randn({3, 4, 5})},
      {"half", torch::randn({7}).to(torch::kFloat16)},
      {"brain", torch::randn({2, 3}).to(torch::kBFloat16)},
      {"i32", torch::randint(-1000, 1000, {6}, torch::kInt32)},
      {"i64", torch::randint(-100000, 100000, {2, 2}, torch::kInt64)},
      {"u8", torch::randint(0, 255, {9}, torch::kUInt8)},
      {"empty", torch::zeros({0, 4})},
  };
  const std::string path = "/tmp/memscope-roundtrip-" + std::to_string(getpid()) + ".safetensors";
  write_safetensors(path, tensors, {{"rule", "{\"window\":8}"}});

  SafetensorsFile file(path);
  CHECK(file.header().metadata.at("rule") == "{\"window\":8}");
  REQUIRE(file.header().tensors.size() == tensors.size());
  for (const auto& [name, tensor] : tensors) {
    INFO(name);
    const StTensorInfo* info = file.find(name);
    REQUIRE(info);
    CHECK(info->shape == tensor.sizes().vec());
    const auto bytes = file.read(*info);
    const torch::Tensor contiguous = tensor.contiguous();
    REQUIRE(bytes.size() == static_cast<std::size_t>(contiguous.nbytes()));
    if (!bytes.empty()) CHECK(std::memcmp(bytes.data(), contiguous.data_ptr(), bytes.size()) == 0);  // empty: data_ptr is null
  }
  std::remove(path.c_str());
}
