#include "app/gui/path_browser.h"

#include <algorithm>
#include <filesystem>

namespace memscope::app {

namespace fs = std::filesystem;

namespace {

bool has_suffix(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A session is a directory with a session.json (DESIGN "Sessions"), whatever its name.
bool is_session(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::is_regular_file(p / "session.json", ec);
}

std::string with_slash(std::string s) { return s.empty() || s.back() == '/' ? s : s + "/"; }

}  // namespace

PathListing list_path(const std::string& typed, PathKind kind) {
  PathListing out;
  std::error_code ec;
  // The folder: the typed path when it ends in '/' or names a folder (not a session), else the
  // folder it is in.
  fs::path folder = typed.empty() ? fs::path(".") : fs::path(typed);
  const bool names_folder = !typed.empty() && (typed.back() == '/' || (fs::is_directory(folder, ec) && !is_session(folder)));
  if (!names_folder) folder = folder.parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec)) {
    out.folder = folder.string();
    out.error = folder.string() + ": no such folder";
    return out;
  }
  out.folder = folder.string();
  const std::string prefix = folder == "." && (typed.empty() || typed.rfind("./", 0) != 0) ? "" : with_slash(folder.string());
  std::vector<PathEntry> folders, files;
  fs::directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    out.error = folder.string() + ": " + ec.message();
    return out;
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (folders.size() + files.size() >= kMaxPathEntries) {
      out.truncated = true;
      break;
    }
    PathEntry e;
    e.name = name;
    const bool directory = it->is_directory(ec);
    if (directory && is_session(it->path())) {
      e.path = prefix + name;
      e.pickable = kind == PathKind::Session;
      if (e.pickable) files.push_back(std::move(e));  // a session is one thing, not a folder to walk into
    } else if (directory) {
      e.path = prefix + name + "/";
      e.folder = true;
      folders.push_back(std::move(e));
    } else {
      e.path = prefix + name;
      e.pickable = (kind == PathKind::Checkpoint && has_suffix(name, ".safetensors")) ||
                   (kind == PathKind::SafetensorsOut && has_suffix(name, ".safetensors")) ||
                   (kind == PathKind::CsvOut && has_suffix(name, ".csv"));
      if (e.pickable) files.push_back(std::move(e));  // only what the action takes, beside the folders
    }
  }
  auto by_name = [](const PathEntry& a, const PathEntry& b) { return a.name < b.name; };
  std::sort(folders.begin(), folders.end(), by_name);
  std::sort(files.begin(), files.end(), by_name);
  const fs::path absolute = fs::absolute(folder, ec);
  if (absolute.has_parent_path() && absolute != absolute.root_path()) {
    PathEntry up;
    up.name = "..";
    up.path = with_slash((folder / "..").lexically_normal().string());
    up.folder = true;
    out.entries.push_back(std::move(up));
  }
  out.entries.insert(out.entries.end(), folders.begin(), folders.end());
  out.entries.insert(out.entries.end(), files.begin(), files.end());
  return out;
}

}  // namespace memscope::app
