// CudaGraph's capture streams (model/util/cuda_graph.h): each live graph is captured on a stream no
// other live graph holds, since PyTorch after 2.11 frees a capture stream's cuBLAS workspaces when
// a graph captured there is destroyed (pytorch/pytorch#193402); and a graph gone leaves its stream
// to the next, since up to 2.11 cuBLAS keeps a workspace for every stream it has run on. The
// streams are a GPU's alone: on the CPU this checks that a refused capture takes none.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <stdexcept>

#include "model/util/cuda_graph.h"
#include "support/test_device.h"

using memscope::model::CudaGraph;

TEST_CASE(
    "cuda graph: live graphs never share a capture stream, and a graph gone leaves its stream to the next",
    "[graph]") {
  const c10::Device device = memscope::test::test_device();
  const CudaGraph::StreamCount start = CudaGraph::capture_streams();
  at::Tensor x = torch::full({32, 32}, 0.5, torch::TensorOptions().device(device));
  at::Tensor y;
  const auto work = [&] { y = x.matmul(x); };

  if (!device.is_cuda() || !CudaGraph::available()) {
    CudaGraph graph;  // a CPU model: refused before any stream is taken
    CHECK_THROWS_AS(graph.capture(device, work, work), std::invalid_argument);
    const CudaGraph::StreamCount now = CudaGraph::capture_streams();
    CHECK((now.made == start.made && now.held == start.held && now.idle == start.idle));
    return;  // the rest needs a GPU
  }
  auto first = std::make_unique<CudaGraph>(), second = std::make_unique<CudaGraph>();
  first->capture(device, work, work);
  second->capture(device, work, work);
  CHECK(CudaGraph::capture_streams().held == start.held + 2);  // one each

  first.reset();  // leaves its stream idle
  CHECK(CudaGraph::capture_streams().held == start.held + 1);
  const CudaGraph::StreamCount before_third = CudaGraph::capture_streams();
  REQUIRE(before_third.idle >= 1);
  auto third = std::make_unique<CudaGraph>();
  third->capture(device, work, work);
  const at::Tensor third_out = y;
  CHECK(CudaGraph::capture_streams().held == start.held + 2);
  CHECK(CudaGraph::capture_streams().made == before_third.made);  // an idle one, taken again
  second->capture(device, work, work);                            // captured again: on its own stream still
  const at::Tensor second_out = y;
  CHECK(CudaGraph::capture_streams().held == start.held + 2);
  CHECK(CudaGraph::capture_streams().made == before_third.made);

  // Both live graphs still replay what they captured, on new values.
  x.fill_(2.0);
  third->replay();
  second->replay();
  torch::cuda::synchronize();
  const at::Tensor expected = torch::full({32, 32}, 128.0, x.options());  // 32 × 2 × 2
  CHECK(third_out.equal(expected));
  CHECK(second_out.equal(expected));

  // A capture that fails half-way leaves no graph to replay; its stream is left to the next once
  // the object goes.
  const CudaGraph::StreamCount before_failure = CudaGraph::capture_streams();
  {
    CudaGraph failing;
    CHECK_THROWS_WITH(failing.capture(device, work, [] { throw std::runtime_error("half-way"); }),
                      "half-way");
    CHECK_THROWS_AS(failing.replay(), std::logic_error);
    CHECK(CudaGraph::capture_streams().held == before_failure.held + 1);
  }
  const CudaGraph::StreamCount after_failure = CudaGraph::capture_streams();
  CHECK(after_failure.held == before_failure.held);
  // Idle again: an idle one it took came back, or the one it made joined them.
  CHECK(after_failure.idle - before_failure.idle == after_failure.made - before_failure.made);
}
