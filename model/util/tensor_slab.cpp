#include "model/util/tensor_slab.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/accumulate.h>

namespace memscope::model {

TensorSlab::TensorSlab(int64_t elements, const at::TensorOptions& options) : slab_(at::empty({elements}, options)) {}

at::Tensor TensorSlab::take(at::IntArrayRef sizes) {
  const int64_t count = c10::multiply_integers(sizes);
  TORCH_CHECK(used_ + count <= slab_.numel(), "tensor slab: ", count, " elements asked for, ", slab_.numel() - used_,
              " left");
  // What a view op builds, without the dispatch: the slab's storage, its keys and dtype, an offset
  // and contiguous sizes.
  at::Tensor piece =
      at::detail::make_tensor<c10::TensorImpl>(c10::Storage(slab_.storage()), slab_.key_set(), slab_.dtype());
  c10::TensorImpl* impl = piece.unsafeGetTensorImpl();
  impl->set_storage_offset(slab_.storage_offset() + used_);
  impl->set_sizes_contiguous(sizes);
  used_ += count;
  return piece;
}

}  // namespace memscope::model
