// A minimal safetensors writer (https://github.com/huggingface/safetensors, format v0):
// 8-byte little-endian header length N, N bytes of JSON header (padded with spaces to a
// multiple of 8), then the raw little-endian tensor bytes in header order.
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace memscope::model {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes `tensors` (any device; F32, F16, BF16, I32, I64, U8 kept as they are, F64 stored as F32,
// bool as U8) and string metadata to `path`. The file is written to `path`.tmp and renamed, so a
// killed process never leaves a torn file. Throws UserError naming the file on I/O failure and
// on duplicate or empty tensor names.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace memscope::model
