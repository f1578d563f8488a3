#include "model/session/safetensors_writer.h"

#include "model/session/safetensors_blob_writer.h"

namespace memscope::model {

namespace {

// The safetensors dtype name for a tensor stored as is, or "" when it must be converted first.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kInt: return "I32";
    case at::kLong: return "I64";
    case at::kByte: return "U8";
    default: return "";
  }
}

at::Tensor storable(const at::Tensor& t) {
  at::Tensor cpu = t.detach().to(at::kCPU);
  if (cpu.scalar_type() == at::kBool) cpu = cpu.to(at::kByte);
  if (dtype_name(cpu.scalar_type()).empty()) cpu = cpu.to(at::kFloat);
  return cpu.contiguous();
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> data;  // keeps the converted tensors alive while the blobs borrow them
  std::vector<StBlob> blobs;
  data.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    data.push_back(storable(tensor));
    const at::Tensor& t = data.back();
    StDtype dtype = StDtype::F32;
    parse_st_dtype(dtype_name(t.scalar_type()), dtype);
    blobs.push_back({name, dtype, t.sizes().vec(), t.data_ptr()});
  }
  write_safetensors_blobs(path, blobs, metadata);
}

}  // namespace memscope::model
