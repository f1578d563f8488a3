// safetensors ↔ at::Tensor: the torch side of the (torch-free) reader.
#pragma once
#include <ATen/core/Tensor.h>

#include "model/session/safetensors_reader.h"

namespace memscope::model {

// The tensor's bytes as a CPU tensor of its stored dtype and shape (a copy, owned).
at::Tensor read_tensor(const SafetensorsFile& file, const StTensorInfo& info);

// read_tensor by name; throws UserError naming the file and the tensor when it is absent.
at::Tensor read_tensor(const SafetensorsFile& file, const std::string& name);

}  // namespace memscope::model
