#include "model/session/safetensors_writer.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/util/errors.h"

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
  static_assert(sizeof(uint64_t) == 8);
  std::vector<at::Tensor> data;
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__" || !names.insert(name).second)
      throw UserError(path.string() + ": tensor name '" + name + "' is empty, reserved or repeated");
    at::Tensor t = storable(tensor);
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw UserError(path.string() + ": cannot open for writing");
    const uint64_t n = text.size();
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);  // little-endian
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      throw UserError(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw UserError(path.string() + ": cannot rename the temporary file into place");
  }
}

}  // namespace memscope::model
