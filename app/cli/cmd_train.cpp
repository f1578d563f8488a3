// memscope-cli train: the outer loop on a preset, with checkpoints and resume (issue 4).
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/interrupt.h"
#include "app/cli/rank_launcher.h"
#include "app/cli/train_progress.h"
#include "app/cli/train_served.h"
#include "model/config/preset.h"
#include "model/dist/data_parallel.h"
#include "model/engine/train_frame.h"
#include "model/probe/detectors.h"
#include "model/session/output_check.h"
#include "model/session/session_writer.h"
#include "model/train/checkpoint.h"
#include "model/train/graphed_train_pass.h"
#include "model/train/trainer.h"
#include "model/util/compute_threads.h"
#include "model/util/cpu_memory_watch.h"
#include "model/util/device.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct TrainOptions {
  std::string preset = "demo-mqar";
  bool preset_given = false;
  std::vector<std::string> sets;
  int64_t steps = -1;
  std::string out;
  bool out_given = false;  // --out "" is an error, not "no checkpoint"
  std::string resume;
  std::string record;
  int64_t save_every = 0;
  bool json = false;
  bool force = false;
  int threads = 0;
  // Data-parallel (issue 21): --nproc starts the ranks here; a launcher's variables make this a rank.
  int nproc = 0;
  int dist_timeout = 120;     // seconds a rendezvous or a collective waits for the other ranks
  int64_t dist_check_every = 100;  // steps between the parameter checksums (and one at the end)
  ServeFlags serve;                // --serve, --token (issue 22)
  bool paused = false;             // --paused: a served run waits for a viewer's run or step
};

// The inputs an output must not overwrite: a preset given as a file, the checkpoint resumed from.
std::vector<std::filesystem::path> train_inputs(const TrainOptions& o) {
  std::vector<std::filesystem::path> inputs;
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.preset, ec)) inputs.emplace_back(o.preset);
  if (!o.resume.empty()) inputs.emplace_back(o.resume);
  return inputs;
}

// Where a checkpoint goes when --out fails at the end (a disk filled up, a directory vanished):
// the run is written next to the temporary directory rather than thrown away.
std::filesystem::path rescue_path(const std::string& out) {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path dir = tmp && *tmp ? tmp : "/tmp";
  return dir / ("memscope-rescued-" + std::to_string(::getpid()) + "-" + std::filesystem::path(out).filename().string());
}

void train(const TrainOptions& o);

// Set once this process is a rank other than 0: its errors then say which rank they come from.
std::string g_rank_prefix;

void run_train(const TrainOptions& o) {
  try {
    train(o);
  } catch (const model::UserError& e) {
    const std::string what = e.what();
    if (g_rank_prefix.empty() || what.rfind("rank ", 0) == 0) throw;
    throw model::UserError(g_rank_prefix + what);
  }
}

// The launcher checks what would fail on every rank alike (the preset, a batch the ranks cannot
// share) once, before it starts them: one error line instead of N.
void check_before_launch(const TrainOptions& o, const std::vector<std::string>& sets) {
  using namespace memscope::model;
  const Preset preset = o.resume.empty() ? load_preset(o.preset, sets) : checkpoint_preset(read_checkpoint(o.resume), sets);
  if (preset.train.batch % o.nproc != 0)
    throw UserError("train --nproc " + std::to_string(o.nproc) + ": train.batch=" + std::to_string(preset.train.batch) +
                    " is not a multiple of it (every rank computes an equal share of the batch)");
}

void train(const TrainOptions& o) {
  using namespace memscope::model;
  // A rank of a launch (ours or torchrun's) has the launcher variables; --nproc without them
  // makes this process the launcher.
  const bool launched_by_us = std::getenv(kLaunchedRankVariable) != nullptr;
  const std::optional<LaunchEnv> launch = read_launch_env();
  if (!o.resume.empty() && o.preset_given)
    throw UserError("train: --resume continues with the preset stored in " + o.resume +
                    "; --preset does not apply (change knobs with --set)");
  std::vector<std::string> sets = o.sets;
  if (o.steps >= 0) sets.push_back("train.steps=" + std::to_string(o.steps));
  if (o.nproc > 0 && !launched_by_us) {
    if (launch) throw UserError("train: --nproc starts its own ranks, but WORLD_SIZE is set (a launcher started this "
                                "process): use one or the other");
    check_before_launch(o, sets);
    throw ExitStatus{launch_local_ranks(o.nproc, std::max(5, o.dist_timeout / 4))};
  }
  if (launch && launch->rank != 0) g_rank_prefix = "rank " + std::to_string(launch->rank) + ": ";
  set_compute_threads(o.threads);  // ATen and OpenBLAS (model/util/compute_threads.h)
  if (o.paused && !o.serve.serving())
    throw UserError("train --paused waits for a viewer to run it: it needs --serve");
  if (o.serve.serving()) {
    if (o.nproc > 0 || launch)
      throw UserError("train --serve serves one process's run; it does not combine with --nproc or a launcher's ranks "
                      "(record rank 0 with --record and follow it with memscope --follow DIR)");
    if (o.save_every > 0) throw UserError("train --serve: --save-every does not apply; a viewer saves with its checkpoint command");
    train_served({o.preset, sets, o.resume, o.out, o.record, o.json, o.force, o.paused, o.serve});
    return;
  }
  Trainer trainer = o.resume.empty() ? Trainer(load_preset(o.preset, sets)) : Trainer::resume(o.resume, sets);
  const TrainConfig& c = trainer.preset().train;
  std::shared_ptr<DataParallel> group;
  if (launch) {
    DataParallelOptions dp;
    dp.timeout = std::chrono::seconds(o.dist_timeout);
    dp.cuda = trainer.model()->embedding.device().is_cuda();
    group = std::make_shared<DataParallel>(*launch, dp);
    trainer.set_data_parallel(group);
  }
  // Rank 0 alone writes: the log, the checkpoints and the session. The other ranks compute.
  const bool lead = !group || group->rank() == 0;
  // Every output is checked now, not after the run: its directory, its space, what it would overwrite.
  if (o.out_given && lead) {
    int64_t parameter_bytes = 0;
    for (const auto& p : trainer.model()->parameters()) parameter_bytes += p.numel() * 4;
    // parameters and AdamW's two moments, plus the header and the preset
    check_output({"--out", o.out, FileKind::Checkpoint, static_cast<uint64_t>(3 * parameter_bytes + (1 << 20))},
                 train_inputs(o), o.force);
  }
  if (!o.record.empty() && lead)
    check_output({"--record", session_dir_for(o.record), FileKind::Session, 64u << 20}, {}, false);
  TrainProgress progress(o.json || !isatty(STDOUT_FILENO), c.steps, lead);
  if (!o.resume.empty()) {
    const int64_t was = checkpoint_world_size(o.resume), now = group ? group->world_size() : 1;
    progress.message("resumed " + o.resume + " at step " + std::to_string(trainer.step()) +
                     (was != now ? " (written by " + std::to_string(was) + " rank(s), now " + std::to_string(now) + ")" : ""));
  }
  if (group)
    progress.message("data-parallel: " + std::to_string(group->world_size()) + " ranks on " + group->backend() + ", " +
                     std::to_string(c.batch / group->world_size()) + " of " + std::to_string(c.batch) +
                     " sequences per rank");

  // Ctrl+C or SIGTERM finishes the step in flight, saves (with --out), closes the recording and
  // stops: hours of training are not lost.
  catch_interrupts();
  auto save = [&] {
    if (o.out.empty() || !lead) return;
    try {
      trainer.save(o.out);
    } catch (const UserError& e) {
      const auto rescue = rescue_path(o.out);
      trainer.save(rescue);  // throws too when even that fails: the error then names both
      throw UserError(one_line(e.what()) + "; the run (step " + std::to_string(trainer.step()) + ") was saved to " +
                      rescue.string() + " instead");
    }
    progress.message("checkpoint " + o.out + " at step " + std::to_string(trainer.step()));
  };
  // --record: every step's frame (probes per probe.*) and the detectors' events go to a session.
  std::unique_ptr<SessionWriter> recording;
  Detectors detectors(trainer.preset().detect);
  if (!o.record.empty() && lead) {
    SessionInfo info =
        session_info_for(trainer.preset(), describe_device(trainer.model()->embedding.device()), trainer.task().vocab_size());
    info.world_size = group ? group->world_size() : 1;
    recording = std::make_unique<SessionWriter>(session_dir_for(o.record), info);
    progress.message("recording " + recording->path());
  }
  int64_t frame_step = trainer.step();  // a resumed run's frames go on from its step
  // Every rank stops at the same step: a signal that reached one rank is agreed on after each step.
  auto stop_requested = [&] { return group ? group->any(interrupted()) : interrupted(); };
  bool stop = stop_requested();
  while (!trainer.done() && !stop) {
    const auto start = std::chrono::steady_clock::now();
    TrainStepResult r;
    try {
      r = trainer.train_step();
    } catch (const std::exception&) {
      // A step that failed changed nothing (a loss that is not finite, a step that does not fit in
      // memory, say TNT's second stage with its larger chunk): keep the steps before it.
      if (trainer.step() > 0) save();
      throw;
    }
    if (recording) {
      auto frame = train_frame(trainer, r, ++frame_step, 0, trainer.preset().probe);
      frame->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      try {
        recording->on_frame(*frame);
      } catch (const UserError&) {
        save();  // the disk failed for the recording: keep the training before saying so
        throw;
      }
      for (const Event& e : detectors.observe(*frame)) recording->on_event(e);
      for (const Event& e : recording->take_notices()) progress.message(e.message);
    }
    // Measured on the first step of each shape (CPU): what to expect, before the run is hours in.
    if (r.memory_peak_bytes > 0 && lead) {
      progress.message(
          "memory: a step's tensors peak at " + model::memory_size_text(r.memory_peak_bytes) +
          (c.micro_batch > 0 ? " (train.micro_batch=" + std::to_string(c.micro_batch) + ")" : ""));
    }
    if (r.step % c.log_every == 0 || trainer.done()) progress.step(r);
    if (lead && c.eval_every > 0 && r.step % c.eval_every == 0 && !trainer.done())
      progress.eval(r.step, trainer.evaluate(c.eval_batches));
    if (group && o.dist_check_every > 0 && r.step % o.dist_check_every == 0) trainer.check_ranks_agree();
    if (o.save_every > 0 && r.step % o.save_every == 0) save();
    stop = stop_requested();
  }
  trainer.check_ranks_agree();  // what is saved is what every rank has
  if (stop) {
    save();
    if (recording) recording->close();
    if (!lead) throw ExitStatus{128 + (interrupt_signal() ? interrupt_signal() : SIGINT)};  // rank 0 says it
    throw Interrupted("interrupted at step " + std::to_string(trainer.step()) +
                      (o.out.empty() ? "" : "; checkpoint " + o.out) + (recording ? "; recorded " + recording->path() : ""));
  }
  if (lead) progress.eval(trainer.step(), trainer.evaluate(c.eval_batches));
  if (const GraphedTrainPass* graph = trainer.graphed_pass(); lead && graph) {  // a CUDA model (engine.cuda_graph)
    progress.message(graph->failure().empty()
                         ? "engine.cuda_graph: " + std::to_string(graph->replays()) + " training passes replayed from " +
                               std::to_string(graph->captures()) + " captures"
                         : "engine.cuda_graph: trained without the graph after a failed capture: " + graph->failure());
  } else if (const std::string why = trainer.pass_graph_not_applicable();
             lead && trainer.pass_graph_wanted() && !why.empty()) {
    progress.message("engine.cuda_graph: trained without the graph: " + why);  // a CUDA model, MAC say
  }
  save();
  if (recording) {
    recording->close();
    progress.message("recorded " + recording->path() + " (" + std::to_string(recording->stats().frames_written) + " frames)");
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a preset's model (JSON lines when piped, a progress bar on a terminal)");
  cmd->add_option("--preset,-p", o->preset, "Preset name (assets/presets) or .toml path")
      ->capture_default_str()
      ->each([o](const std::string&) { o->preset_given = true; });
  cmd->add_option("--steps,-n", o->steps, "Training steps (same as --set train.steps=N)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE (repeatable), e.g. --set train.lr=1e-3");
  cmd->add_option("--out,-o", o->out, "Write a checkpoint (safetensors) here at the end and on Ctrl+C")
      ->each([o](const std::string&) { o->out_given = true; });
  cmd->add_flag("--force", o->force, "Let --out overwrite the resumed checkpoint, the preset file or a file of another kind");
  cmd->add_option("--resume", o->resume, "Continue from this checkpoint (its preset, with --set on top)");
  cmd->add_option("--record", o->record, "Record every step's frame and events to a session DIR (NAME.memscope)");
  cmd->add_option("--save-every", o->save_every, "Also write --out every N steps")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--threads", o->threads, "Torch CPU threads (default: LibTorch's choice)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", o->json, "JSON lines even on a terminal");
  cmd->add_option("--nproc", o->nproc,
                  "Train data-parallel on N local ranks (c10d Gloo); torchrun/srun set RANK, WORLD_SIZE, "
                  "MASTER_ADDR and MASTER_PORT instead")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--dist-timeout", o->dist_timeout, "Seconds the rendezvous and each collective wait for the other ranks")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--dist-check-every", o->dist_check_every,
                  "Steps between checks that every rank holds the same parameters (0: only at the end)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  add_serve_flags(cmd, o->serve);
  cmd->add_flag("--paused", o->paused,
                "With --serve: start paused, so that a viewer attaches before step 1 and runs or steps it");
  cmd->callback([o] { run_train(*o); });
}

}  // namespace memscope::app
