// memscope-cli inspect: what a recorded session holds and whether any of it was lost (issue 6).
// A session directory gets the full report; a single .safetensors file (a chunk or an export)
// gets its tensors. A damaged session is still reported, then the exit status is 1.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "app/cli/commands.h"
#include "model/session/session_summary.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

std::string human_bytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 20)) std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024) std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  return text;
}

std::string join(const nlohmann::json& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n.get<std::string>();
  return out.empty() ? "none" : out;
}

void print_session(const nlohmann::json& s) {
  std::cout << "session   " << s["path"].get<std::string>()
            << (s["closed"].get<bool>() ? "" : "   NOT CLOSED: the recording did not stop cleanly") << '\n';
  std::cout << "recorded  " << s["created"].get<std::string>() << " by memscope " << s["memscope_version"].get<std::string>()
            << " on " << s["device"].get<std::string>()
            << (s.value("world_size", 1) > 1 ? ", rank 0 of " + std::to_string(s.value("world_size", 1)) + " (data-parallel)" : "")
            << '\n';
  const auto& m = s["model"];
  std::cout << "model     preset " << s["preset"].get<std::string>() << ": " << m["block"].get<std::string>() << " block, "
            << m["structure"].get<std::string>() << " memory, " << m["layers"] << " layers x " << m["memory_heads"]
            << " heads, d_model " << m["d_model"] << ", vocab " << m["vocab"] << '\n';
  std::cout << "frames    " << s["frames"] << " in " << s["chunks"] << " chunks (" << human_bytes(s["bytes"].get<uint64_t>())
            << ")\n";
  for (const auto& t : s["timelines"])
    std::cout << "  timeline " << t["timeline"] << ": " << t["steps"] << " steps, " << t["first_step"] << " to "
              << t["last_step"] << '\n';
  std::cout << "probes    " << s["layers"] << " layers x " << s["heads"] << " heads, weights " << join(s["weights"]) << '\n';
  std::cout << "  per head:   " << join(s["head_metrics"]) << '\n';
  std::cout << "  per weight: " << join(s["weight_metrics"]) << '\n';
  const auto& snaps = s["snapshots"];
  std::cout << "  snapshots (" << snaps["dtype"].get<std::string>() << "):";
  if (snaps["tensors"].empty()) std::cout << " none";
  for (const auto& [name, v] : snaps["tensors"].items())
    std::cout << "  " << name << ' ' << v["rows"] << 'x' << v["cols"] << " (of " << v["full_rows"] << 'x' << v["full_cols"]
              << ") in " << v["frames"] << " frames";
  std::cout << "\n  (metrics and snapshots as found in the first " << s["sampled"]["chunks"] << " chunks)\n";
  std::cout << "events    " << s["events"]["total"];
  for (const auto& [kind, n] : s["events"]["by_kind"].items()) std::cout << "  " << kind << ' ' << n;
  std::cout << '\n';
  const auto& sums = s["checksums"];
  if (sums["unverified"].get<int64_t>() == 0)
    std::cout << "checksums verified: every chunk's bytes match their CRC32C\n";
  else
    std::cout << "checksums unverified: " << sums["unverified"] << " of " << s["chunks"]
              << " chunks carry no checksums (written by an earlier memscope); their bytes cannot be checked\n";
  if (s["damage"].empty()) {
    std::cout << "damage    none\n";
  } else {
    std::cout << "damage\n";
    for (const auto& d : s["damage"])
      std::cout << "  " << d["file"].get<std::string>() << " (" << human_bytes(d["bytes"].get<uint64_t>())
                << "): " << d["reason"].get<std::string>() << '\n';
  }
  const auto& lost = s["lost"];
  if (lost["frames"].get<int64_t>() != 0 || lost["first_step"].get<int64_t>() != 0) {
    std::cout << "lost      ";
    if (lost["frames"].get<int64_t>() > 0) std::cout << lost["frames"] << " frames, ";
    else if (lost["frames"].get<int64_t>() < 0) std::cout << "an unknown number of frames (not closed), ";
    if (lost["first_step"].get<int64_t>() > 0)
      std::cout << "steps " << lost["first_step"] << " to at least " << lost["last_step"] << ", ";
    std::cout << human_bytes(lost["bytes"].get<uint64_t>()) << " unreadable\n";
  }
  std::cout << "config    record.matrix_dtype " << s["config"]["record"]["matrix_dtype"].get<std::string>()
            << ", record.matrix_every " << s["config"]["record"]["matrix_every"] << ", record.chunk_steps "
            << s["config"]["record"]["chunk_steps"] << "; the preset:\n";
  std::istringstream toml(s["config"]["preset_toml"].get<std::string>());
  for (std::string line; std::getline(toml, line);) std::cout << "  " << line << '\n';
}

void print_file(const nlohmann::json& f) {
  std::cout << "file      " << f["path"].get<std::string>() << " (" << human_bytes(f["data_bytes"].get<uint64_t>())
            << " of tensors, metadata: " << join(f["metadata_keys"]) << ")\n";
  for (const auto& t : f["tensors"]) {
    std::cout << "  " << t["name"].get<std::string>() << "  " << t["dtype"].get<std::string>() << " [";
    bool first = true;
    for (const auto& d : t["shape"]) std::cout << (first ? "" : ", ") << d, first = false;
    std::cout << "]\n";
  }
  const auto& sums = f["checksums"];
  if (sums.is_string() && sums.get<std::string>() == "verified") std::cout << "checksums verified (CRC32C per tensor)\n";
  else if (sums.is_string()) std::cout << "checksums unverified: the file has none (an older or another writer)\n";
  else std::cout << "checksums FAIL for " << join(sums["failing"]) << "\n";
}

void run_inspect(const InspectOptions& o) {
  using namespace memscope::model;
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.path, ec)) {
    const auto f = safetensors_summary(o.path);
    if (o.json) std::cout << f.dump() << '\n';
    else print_file(f);
    std::cout.flush();
    if (f["checksums"].is_object())
      throw UserError(o.path + " is damaged: " + std::to_string(f["checksums"]["failing"].size()) +
                      " tensor(s) fail their CRC32C checksum");
    return;
  }
  const SessionReader session(o.path);
  const auto s = session_summary(session);
  if (o.json) std::cout << s.dump() << '\n';
  else print_session(s);
  std::cout.flush();
  if (s["intact"].get<bool>()) return;
  // The verdict names what is wrong: damaged files, a recording that was never closed, or frames
  // the totals or the events know of that no chunk holds.
  const SessionLoss& loss = session.loss();
  std::string why;
  if (!s["damage"].empty()) why = std::to_string(s["damage"].size()) + " damaged file(s) listed above";
  if (!loss.closed)
    why += std::string(why.empty() ? "" : "; ") + "the recording was not closed (the process stopped while recording)";
  if (loss.first_step_lost > 0)
    why += std::string(why.empty() ? "" : "; ") + "steps " + std::to_string(loss.first_step_lost) + " to " +
           (loss.closed ? "" : "at least ") + std::to_string(loss.last_step_lost) + " are lost";
  else if (loss.frames_lost > 0)
    why += std::string(why.empty() ? "" : "; ") + std::to_string(loss.frames_lost) + " frames are lost";
  throw UserError(session.dir().string() + ": " + why + "; everything else reads");
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Summarise a recorded session (NAME.memscope) or one .safetensors file");
  cmd->add_option("path", o->path, "Session directory, or a .safetensors file")->required();
  cmd->add_flag("--json", o->json, "The same as one JSON object");
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace memscope::app
