// memscope-cli: the headless side of memscope (training, stepping, traces, benchmarks).
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/interrupt.h"
#include "app/cli/rank_launcher.h"
#include "memscope/version.h"
#include "model/util/allocator.h"
#include "model/util/small_block_cache.h"
#include "model/util/device.h"
#include "model/util/errors.h"

int main(int argc, char** argv) {
  memscope::model::keep_large_blocks_in_heap();  // model/util/allocator.h
  memscope::model::install_small_block_cache();  // model/util/small_block_cache.h
  CLI::App app{"memscope-cli: headless tools for test-time-learning memory (Titans, Atlas, HOPE, TTT)"};
  app.set_version_flag("--version", std::string("memscope ") + MEMSCOPE_VERSION +
                                        " (LibTorch " + MEMSCOPE_TORCH_VERSION + ")");
  app.require_subcommand(1);
  // Where models run, for every command; after the command's name too (`train --device cuda`).
  app.fallthrough();
  app.add_option_function<std::string>(
         "--device", [](const std::string& d) { memscope::model::set_default_device(memscope::model::pick_device(d)); },
         "auto, cpu, cuda or cuda:N: where the model runs (default cpu)")
      ->envname("MEMSCOPE_DEVICE");
  memscope::app::set_command_line(argc, argv);  // train --nproc re-runs it as each rank
  memscope::app::register_info(app);
  memscope::app::register_memory_trace(app);
  memscope::app::register_train(app);
  memscope::app::register_eval(app);
  memscope::app::register_step(app);
  memscope::app::register_knobs(app);
  memscope::app::register_presets(app);
  memscope::app::register_inspect(app);
  memscope::app::register_export(app);
  memscope::app::register_attach(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Bad arguments: one clear line and a non-zero exit (issue 2).
    std::cerr << "memscope-cli: " << e.what() << " (see memscope-cli --help)\n";
    return 2;
  } catch (const memscope::app::ExitStatus& e) {
    return e.code;
  } catch (const memscope::app::Interrupted& e) {
    std::cerr << "memscope-cli: " << e.what() << "\n";
    return memscope::app::interrupt_exit_code();
  } catch (const std::exception& e) {
    std::cerr << "memscope-cli: " << memscope::model::one_line(e.what()) << "\n";
    return 1;
  }
  return 0;
}
