// The File menu's path prompt lists the folder it points into (issue 19): what each action can
// open, folders to walk into, and clicks that get there, in the real window.
#include "app/gui/path_browser.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "app/app_harness.h"
#include "model/session/session_reader.h"
#include "support/run_process.h"

namespace fs = std::filesystem;
using memscope::app::list_path;
using memscope::app::PathKind;
using memscope::test::run_process;

namespace {

std::vector<std::string> names(const memscope::app::PathListing& l) {
  std::vector<std::string> out;
  for (const auto& e : l.entries) out.push_back(e.name);
  return out;
}

// A folder with a session, a checkpoint, a CSV, a subfolder, a dot file and a stray text file.
fs::path make_tree(const std::string& name) {
  const fs::path root = memscope::test::temp_path(name);
  fs::remove_all(root);
  fs::create_directories(root / "runs" / "a.memscope");
  std::ofstream(root / "runs" / "a.memscope" / "session.json") << "{}";
  fs::create_directories(root / "sub");
  std::ofstream(root / "model.safetensors") << "x";
  std::ofstream(root / "table.csv") << "x";
  std::ofstream(root / "notes.txt") << "x";
  std::ofstream(root / ".hidden") << "x";
  return root;
}

}  // namespace

TEST_CASE("path prompt listing: each action sees what it can take, folders first", "[gui]") {
  const fs::path root = make_tree("listing");
  const std::string dir = root.string() + "/";
  CHECK(names(list_path(dir, PathKind::Session)) == std::vector<std::string>{"..", "runs", "sub"});
  CHECK(names(list_path(dir, PathKind::Checkpoint)) == std::vector<std::string>{"..", "runs", "sub", "model.safetensors"});
  CHECK(names(list_path(dir, PathKind::CsvOut)) == std::vector<std::string>{"..", "runs", "sub", "table.csv"});
  // A session is one pickable entry, not a folder to walk into; a typed file name lists its folder.
  const auto runs = list_path(dir + "runs/a.mem", PathKind::Session);
  REQUIRE(runs.entries.size() == 2);
  CHECK(runs.entries[1].name == "a.memscope");
  CHECK(runs.entries[1].pickable);
  CHECK_FALSE(runs.entries[1].folder);
  CHECK(runs.entries[1].path == dir + "runs/a.memscope");
  CHECK(list_path(dir + "runs", PathKind::Session).folder == dir + "runs");
  // A folder that is not there: one line, nothing listed.
  const auto missing = list_path(dir + "nowhere/x", PathKind::Session);
  CHECK(missing.entries.empty());
  CHECK(missing.error == dir + "nowhere: no such folder");
  fs::remove_all(root);
}

TEST_CASE("app: File > Open session, clicked through the listing, opens the session", "[gui]") {
  const fs::path root = memscope::test::temp_path("open-by-click");
  fs::remove_all(root);
  fs::create_directories(root / "runs");
  const auto record = run_process({MEMSCOPE_CLI_BINARY, "step", "--preset", "demo-mqar", "--tokens", "6", "--record",
                                   (root / "runs" / "clicked.memscope").string()});
  INFO(record.output);
  REQUIRE(record.exit_code == 0);

  memscope::app::GuiOptions options;
  memscope::test::AppHarness h(options);
  h.app().view().prompt = "open";
  h.app().view().prompt_path = root.string() + "/";
  h.frames(2);
  REQUIRE(h.app().rects().count("prompt/entry/runs"));
  h.click("prompt/entry/runs");
  h.frames(2);
  CHECK(h.app().view().prompt_path == root.string() + "/runs/");
  REQUIRE(h.app().rects().count("prompt/entry/clicked.memscope"));
  // The session sits where "runs/" was: wait out ImGui's double-click time, or the two single
  // clicks would be one double-click (which opens at once; that path is the OK button's too).
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  h.click("prompt/entry/clicked.memscope");
  h.frames(2);
  CHECK(h.app().view().prompt_path == root.string() + "/runs/clicked.memscope");
  h.click("prompt/ok");
  h.frames(3);
  CHECK(h.app().view().prompt.empty());
  CHECK_THAT(h.app().main().label, Catch::Contains("clicked.memscope"));
  fs::remove_all(root);
}

TEST_CASE("app: File > Save session as and Record to write into the folder picked in the listing", "[gui]") {
  const fs::path root = memscope::test::temp_path("save-as");
  fs::remove_all(root);
  fs::create_directories(root / "chosen");
  fs::create_directories(root / "old.memscope");
  std::ofstream(root / "old.memscope" / "session.json") << "{}";
  {
    memscope::app::GuiOptions options;
    memscope::test::AppHarness h(options);
    h.app().post_all(memscope::model::Command::steps(8));
    h.settle();
    h.app().view().prompt = "save";
    h.app().view().prompt_path = (root / "mine.memscope").string();
    h.frames(2);
    // A new session goes into a folder, never over a session that is there.
    CHECK(h.app().rects().count("prompt/entry/old.memscope") == 0);
    REQUIRE(h.app().rects().count("prompt/entry/chosen"));
    h.click("prompt/entry/chosen");
    h.frames(2);
    CHECK(h.app().view().prompt_path == (root / "chosen").string() + "/mine.memscope");  // the name stays
    h.click("prompt/ok");
    h.settle();
    CHECK(h.app().view().banner.empty());

    h.app().view().prompt = "record";
    h.app().view().prompt_path = (root / "chosen" / "recorded.memscope").string();
    h.frames(2);
    h.click("prompt/ok");
    h.settle();
    CHECK(h.app().main().status.recording.find("recorded.memscope") != std::string::npos);
    h.app().post_all(memscope::model::Command::steps(3));
    h.settle();
    h.app().toggle_recording();  // stop
    h.settle();
  }
  const memscope::model::SessionReader saved((root / "chosen" / "mine.memscope").string());
  CHECK(saved.info().closed);
  CHECK(saved.steps(0).size() == 8);
  const memscope::model::SessionReader recorded((root / "chosen" / "recorded.memscope").string());
  CHECK(recorded.info().closed);
  CHECK(recorded.steps(0).size() == 11);  // seeded with the 8 held, then 3 more
  fs::remove_all(root);
}
