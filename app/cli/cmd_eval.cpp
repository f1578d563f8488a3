// memscope-cli eval: a checkpoint's accuracy on its task, or on others with the same vocabulary.
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "model/session/safetensors_reader.h"
#include "model/train/checkpoint.h"
#include "model/train/trainer.h"
#include "model/util/compute_threads.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct EvalOptions {
  std::string ckpt;
  std::vector<std::string> tasks;
  std::vector<std::string> sets;
  int64_t batches = 0;
  int threads = 0;
};

// "parameter 'x' holds 3 non-finite values (and 2 more parameters)", or that all are finite.
std::string nonfinite_parameters(const model::Trainer& trainer) {
  std::string first;
  int64_t first_count = 0, others = 0;
  for (const auto& p : trainer.model()->named_parameters()) {
    const int64_t bad = (~torch::isfinite(p.value())).sum().item<int64_t>();
    if (bad == 0) continue;
    if (first.empty()) first = p.key(), first_count = bad;
    else ++others;
  }
  if (first.empty()) return "every parameter is finite (the inputs or the memory's inner loop overflow)";
  return "parameter '" + first + "' holds " + std::to_string(first_count) + " non-finite values" +
         (others > 0 ? " (and " + std::to_string(others) + " more parameters do)" : "");
}

void run_eval(const EvalOptions& o) {
  using namespace memscope::model;
  set_compute_threads(o.threads);  // ATen and OpenBLAS (model/util/compute_threads.h)
  const Trainer trainer = Trainer::resume(o.ckpt, o.sets);  // every tensor read is checked against its CRC32C
  // "verified": every byte matched its checksum; "unverified": written before checksums existed.
  const char* checksums = SafetensorsFile(o.ckpt).header().checksummed ? "verified" : "unverified";
  const int64_t batches = o.batches > 0 ? o.batches : trainer.preset().train.eval_batches;
  std::vector<std::string> kinds = o.tasks;
  if (kinds.empty()) kinds.push_back(trainer.preset().task.kind);
  for (const auto& kind : kinds) {
    TaskConfig config = trainer.preset().task;
    config.kind = kind;
    const std::unique_ptr<Task> task = make_task(config);
    if (task->vocab_size() != trainer.task().vocab_size())
      throw UserError("eval: task '" + kind + "' has a vocabulary of " + std::to_string(task->vocab_size()) +
                      " tokens but the model was trained on " + std::to_string(trainer.task().vocab_size()));
    const EvalResult r = trainer.evaluate(*task, batches);
    std::cout << nlohmann::json{{"task", kind}, {"step", trainer.step()}, {"loss", r.loss},
                                {"acc", r.acc}, {"queries", r.queries}, {"checksums", checksums}}
                     .dump()
              << std::endl;
    // A loss of NaN is not a result: say so, and where it comes from, with a failing exit.
    if (!std::isfinite(r.loss))
      throw UserError("eval: the loss on '" + kind + "' is not finite; " + nonfinite_parameters(trainer) + " in " + o.ckpt);
  }
}

}  // namespace

void register_eval(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "Query accuracy of a checkpoint, one JSON line per task");
  cmd->add_option("--ckpt,-c", o->ckpt, "Checkpoint written by `train --out`")->required();
  cmd->add_option("--task,-t", o->tasks, "Task kind to evaluate (repeatable; default: the training task)")
      ->check(CLI::IsMember({"mqar", "needle", "copy", "text"}));
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE on the checkpoint's preset (e.g. task.gap=64)");
  cmd->add_option("--batches", o->batches, "Evaluation batches (default: train.eval_batches)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", o->threads, "Torch CPU threads")->check(CLI::Range(1, 1024));
  cmd->callback([o] { run_eval(*o); });
}

}  // namespace memscope::app
