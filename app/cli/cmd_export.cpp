// memscope-cli export: a session as one safetensors file (every series with a leading step axis,
// the session JSON in __metadata__) or as CSV (every scalar series a column), issue 6.
#include <chrono>
#include <iostream>

#include "app/cli/commands.h"
#include "model/session/output_check.h"
#include "model/session/session_export.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct ExportOptions {
  std::string path, out, csv;
  bool out_given = false, csv_given = false, force = false;
  model::ExportRange range;
};

void report(const char* what, const std::string& file, const model::ExportResult& r, double seconds) {
  std::cout << "exported " << r.frames << " frames to " << file << " (" << what << ", " << r.bytes << " bytes, "
            << (seconds > 0 ? static_cast<double>(r.bytes) / (1 << 20) / seconds : 0) << " MB/s)\n";
}

void run_export(const ExportOptions& o) {
  using namespace memscope::model;
  if (!o.out_given && !o.csv_given) throw UserError("export: give --out FILE.safetensors and/or --csv FILE.csv");
  const SessionReader session(o.path);
  // Checked before the work: never into the session itself, never over another kind of file.
  if (o.out_given) check_output({"--out", o.out, FileKind::SessionExport, 0}, {session.dir()}, o.force);
  if (o.csv_given) check_output({"--csv", o.csv, FileKind::Csv, 0}, {session.dir(), o.out_given ? o.out : ""}, o.force);
  for (const auto& d : session.damage())
    std::cerr << "memscope-cli: warning: " << session.dir().string() << "/" << d.file << ": " << d.reason << " (skipped)\n";
  using clock = std::chrono::steady_clock;
  if (o.out_given) {
    const auto start = clock::now();
    const auto r = export_safetensors(session, o.out, o.range);
    report("safetensors", o.out, r, std::chrono::duration<double>(clock::now() - start).count());
  }
  if (o.csv_given) {
    const auto start = clock::now();
    const auto r = export_csv(session, o.csv, o.range);
    report("csv", o.csv, r, std::chrono::duration<double>(clock::now() - start).count());
  }
}

}  // namespace

void register_export(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand("export", "Merge a recorded session into one .safetensors file and/or a CSV");
  cmd->add_option("path", o->path, "Session directory (NAME.memscope)")->required();
  cmd->add_option("--out,-o", o->out, "One safetensors file: tensors with a leading step axis, session JSON in __metadata__")
      ->each([o](const std::string&) { o->out_given = true; });
  cmd->add_option("--csv", o->csv, "CSV: one row per step, one column per scalar series")
      ->each([o](const std::string&) { o->csv_given = true; });
  cmd->add_flag("--force", o->force, "Overwrite a file of another kind, or one inside the session");
  cmd->add_option("--timeline", o->range.timeline, "Which timeline (0: main, 1..: forks)")->check(CLI::Range(0, 4096));
  cmd->add_option("--from", o->range.from, "First step to export");
  cmd->add_option("--to", o->range.to, "Last step to export");
  cmd->callback([o] { run_export(*o); });
}

}  // namespace memscope::app
