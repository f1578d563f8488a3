#include "model/session/safetensors_tensor.h"

#include <cstring>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

at::ScalarType scalar_type(StDtype dtype) {
  switch (dtype) {
    case StDtype::F32: return at::kFloat;
    case StDtype::F16: return at::kHalf;
    case StDtype::BF16: return at::kBFloat16;
    case StDtype::I32: return at::kInt;
    case StDtype::I64: return at::kLong;
    case StDtype::U8: return at::kByte;
    case StDtype::F64: return at::kDouble;
  }
  return at::kFloat;
}

}  // namespace

at::Tensor read_tensor(const SafetensorsFile& file, const StTensorInfo& info) {
  const std::vector<unsigned char> bytes = file.read(info);
  at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(scalar_type(info.dtype)));
  // The reader has checked bytes.size() == elements · dtype size; x86 and ARM are little-endian.
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

at::Tensor read_tensor(const SafetensorsFile& file, const std::string& name) {
  const StTensorInfo* info = file.find(name);
  if (!info) throw UserError(file.path() + ": no tensor named '" + name + "'");
  return read_tensor(file, *info);
}

}  // namespace memscope::model
