// Data-parallel training on torch.distributed's c10d (issue 21): a rendezvous through a TCPStore
// and a ProcessGroupGloo on CPU (ProcessGroupNCCL for a CUDA model where LibTorch has it). The
// c10d headers stay in data_parallel.cpp.
//
// Semantics (README "Training on several processes"):
// - rank r computes rows [r·B/W, (r+1)·B/W) of global batch i, which is a pure function of
//   (seed, i), so a shard is a pure function of (seed, i, r, W);
// - each rank scales its loss by W, so the average of the ranks' gradients is the whole batch's
//   gradient, and the run equals single-process training with the same global batch;
// - parameters start identical (broadcast from rank 0) and stay so: every rank applies the same
//   averaged gradient, and check_identical() proves it with a hash all-gather.
//
// Every failure of a collective (a rank that died, a timeout) becomes one UserError line that
// names this rank, the step and, when it can tell, the rank that is gone.
#pragma once
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/dist/launch_env.h"

namespace memscope::model {

// Whether this build can train across processes on the CPU: LibTorch with c10d's Gloo and Gloo's
// headers (Debian's 1.13 has both; pip's 2.x wheel ships no Gloo headers).
bool gloo_available();

struct DataParallelOptions {
  // How long the rendezvous and each collective may wait for the other ranks.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // Gradients travel in buckets of about this size, each all-reduced asynchronously: during the
  // backward (arm_gradient_overlap) or at least while the next bucket is packed.
  int64_t bucket_bytes = 4 << 20;
  // The model is on CUDA: NCCL instead of Gloo (builds with CUDA and NCCL only).
  bool cuda = false;
};

// A rank's share of the work, measured: for the bench and the progress line.
struct CommunicationStats {
  double seconds = 0;  // wall time inside collectives (waiting for slower ranks included)
  int64_t bytes = 0;   // gradient bytes this rank sent into all-reduces
  int64_t calls = 0;   // collectives issued
};

class DataParallel {
 public:
  // Joins the group `env` describes. Rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT unless
  // the launcher hosts it (env.agent_store). A port in use, an unreachable master or a rank that
  // never comes is a UserError once `options.timeout` has passed.
  DataParallel(const LaunchEnv& env, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const;
  int world_size() const;
  std::string backend() const;  // "gloo" or "nccl"

  // The rows [begin, end) of a global batch of `rows` this rank computes. A batch the world does
  // not divide is a UserError (ranks must do equal work for the average to be the batch's).
  std::pair<int64_t, int64_t> shard(int64_t rows) const;

  // The step that failure messages name (the trainer sets it as it goes).
  void set_step(int64_t step);

  // Rank 0's values into everyone's tensors, in place (the parameters at the start of a run).
  void broadcast_from_rank0(const std::vector<at::Tensor>& tensors);
  // Overlaps the next backward with the gradient all-reduce, as DDP does: a hook on each parameter
  // collects its gradient, and a bucket's all-reduce starts once the backward has produced all of
  // it (buckets start in order, the same on every rank). Call just before a step's only backward;
  // average_gradients() then finishes. A backward in several segments (truncated BPTT) must not
  // arm it: a hook sees one segment's part of the gradient.
  void arm_gradient_overlap(const std::vector<at::Tensor>& parameters);
  // Each defined gradient becomes the mean over the ranks, in place, bucket by bucket.
  void average_gradients(const std::vector<at::Tensor>& parameters);
  // Element-wise sum over the ranks, in place (a step's loss and accuracy counts).
  void sum(const at::Tensor& values);
  // True on every rank when `flag` is true on any (a Ctrl+C that reached one rank stops all at
  // the same step).
  bool any(bool flag);
  // Throws a UserError naming the first tensor (by `names`) whose bytes differ from rank 0's.
  void check_identical(const std::vector<at::Tensor>& tensors, const std::vector<std::string>& names);

  const CommunicationStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memscope::model
