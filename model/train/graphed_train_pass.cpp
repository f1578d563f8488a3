#include "model/train/graphed_train_pass.h"

#include <iostream>
#include <string>

#include "model/util/cuda_graph.h"

namespace memscope::model {

namespace {

// As AdamW::zero_grad: the next backward makes new gradients instead of adding to these.
void drop_gradients(const NamedTensors& parameters) {
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

bool same_shapes(const Batch& a, const Batch& b) {
  return a.tokens.defined() && a.tokens.sizes() == b.tokens.sizes() &&
         a.targets.sizes() == b.targets.sizes() && a.query_mask.sizes() == b.query_mask.sizes();
}

}  // namespace

struct GraphedTrainPass::Graph {
  CudaGraph graph;
  TrainPass out;  // in the graph's memory pool: rewritten at each replay
};
bool GraphedTrainPass::capture_available() { return CudaGraph::available(); }

GraphedTrainPass::GraphedTrainPass(bool capture) : capture_(capture) {}
GraphedTrainPass::~GraphedTrainPass() = default;

void GraphedTrainPass::reset() {
  graph_.reset();
  inputs_ = {};
  targets_ = at::Tensor();
  key_.clear();
}

bool GraphedTrainPass::replays_graph() const { return capture_ && graph_ != nullptr; }

TrainPass GraphedTrainPass::run(const TrainPassFn& pass, const Batch& batch, double targets,
                                const std::string& key, const NamedTensors& parameters,
                                const c10::Device& device) {
  if (key != key_ || !same_shapes(inputs_, batch) || inputs_.tokens.device() != device) {
    reset();  // new shapes or new host choices: new buffers, a new graph
    auto like = [&](const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(device)); };
    inputs_ = {like(batch.tokens), like(batch.targets), like(batch.query_mask)};
    targets_ = at::empty({}, at::TensorOptions().dtype(at::kFloat).device(device));
    key_ = key;
  }
  // In place: a graph reads these addresses.
  inputs_.tokens.copy_(batch.tokens);
  inputs_.targets.copy_(batch.targets);
  inputs_.query_mask.copy_(batch.query_mask);
  targets_.fill_(targets);
  if (!capture_) return run_eagerly(pass, parameters);
  if (!graph_) {
    try {
      capture(pass, parameters);
    } catch (const std::exception& e) {
      // An op that cannot be captured (a host read, say) should not stop training: this trainer
      // trains without the graph from here, and says why once.
      const std::string what = e.what();
      failure_ = what.substr(0, what.find('\n'));
      std::cerr
          << "memscope: engine.cuda_graph: capturing the training pass failed, training without the graph: "
          << failure_ << std::endl;
      graph_.reset();
      capture_ = false;
      return run_eagerly(pass, parameters);
    }
  }
  graph_->graph.replay();  // on the current stream, after the copies above
  ++replays_;
  return graph_->out;
}

TrainPass GraphedTrainPass::run_eagerly(const TrainPassFn& pass, const NamedTensors& parameters) {
  drop_gradients(parameters);
  return pass(inputs_, targets_);
}

void GraphedTrainPass::capture(const TrainPassFn& pass, const NamedTensors& parameters) {
  // One eager pass first, as PyTorch's whole-network capture does. Its gradients are dropped, so
  // that the capture's backward makes the graph's own.
  auto made = std::make_unique<Graph>();
  try {
    made->graph.capture(
        targets_.device(),
        [&] {
          drop_gradients(parameters);
          pass(inputs_, targets_);
          drop_gradients(parameters);
        },
        [&] { made->out = pass(inputs_, targets_); });
  } catch (...) {
    drop_gradients(parameters);  // half-made: the eager pass after the failure makes its own
    throw;
  }
  graph_ = std::move(made);
  ++captures_;
}

}  // namespace memscope::model
