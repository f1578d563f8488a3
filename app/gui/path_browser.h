// The listing under the File menu's path prompt (issue 19: "file dialogs are bare text fields"):
// the folder the typed path points into, with what the action can open marked. Dear ImGui has
// no file dialog; this is the small one memscope needs, and the text field stays for pasting.
#pragma once
#include <string>
#include <vector>

namespace memscope::app {

// What a prompt picks: a session directory (open, compare), a checkpoint file, or a place to
// write (the exports: any folder, and files of the export's kind to overwrite; a new session:
// any folder, never over an existing session).
enum class PathKind { Session, Checkpoint, CsvOut, SafetensorsOut, SessionOut };

struct PathEntry {
  std::string name;   // the entry's name; ".." for the parent folder
  std::string path;   // what picking it puts in the prompt (a folder ends in '/')
  bool folder = false;  // navigating into it lists it (a session directory is not a folder here)
  bool pickable = false;  // what the action takes
};

struct PathListing {
  std::string folder;  // the folder listed
  std::vector<PathEntry> entries;  // "..", then folders, then the rest, each by name
  std::string error;   // one line when the folder cannot be read (the entries are then empty)
  bool truncated = false;  // more than the listing shows (kMaxEntries)
};

inline constexpr size_t kMaxPathEntries = 400;

// The folder `typed` points into (itself when it names a folder that is not a session; else its
// parent; "." when empty) and its entries for `kind`. Hidden entries (dot files) are left out.
PathListing list_path(const std::string& typed, PathKind kind);

}  // namespace memscope::app
