// The two decay-weighted contractions of the MLP memory's dgd dual form (chunkwise_forward.cpp,
// SPEC §5 and §9), computed without the decay tensor D[t,r,f] = Π_{r<l≤t} p_l[f] (issue 20).
// Through ATen, D is a [B,H,n,n,d_φ] tensor (4 MB a chunk at n = d_φ = 64) that half a dozen
// elementwise passes and an einsum read and write; here each (r, t) pair keeps D[t,r,·] as a
// running product of the keep factors p, and only the causal half (r ≤ t) is visited. No
// autograd: the dual form uses these in inference only, and its ATen form stays for training.
#pragma once
#include <ATen/core/Tensor.h>

namespace memscope::model {

// With D as above for r ≤ t and 0 otherwise, or shifted by one row (D'[t] = D[t−1], D'[0] = 0)
// when the read comes before the write. keep, q, lr [B,H,n,d]; phi, d_o [B,H,n,c,d];
// gram [B,H,n,n·c]. CPU float32 or float64, contiguous or not.
//   key_query[t, r·c + j] = Σ_f D[t,r,f] q[t,f] lr[r,f] phi[r,j,f]        → [B,H,n,n·c]
//   mixed_read[t, f]      = Σ_r D[t,r,f] lr[r,f] Σ_j gram[t,r·c+j] d_o[r,j,f] → [B,H,n,d]
at::Tensor decayed_key_query(const at::Tensor& keep, const at::Tensor& q, const at::Tensor& lr, const at::Tensor& phi,
                             bool before_write);
at::Tensor decayed_mixed_read(const at::Tensor& keep, const at::Tensor& lr, const at::Tensor& gram, const at::Tensor& d_o,
                              bool before_write);

// Whether these apply: CPU, float32 or float64, and no autograd.
bool decayed_contractions_apply(const at::Tensor& like);

}  // namespace memscope::model
