// --serve and --token for `train` and `step` (issue 22): the flags, the server they make, and the
// line that tells the user how to attach.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/remote/remote_server.h"

namespace memscope::app {

struct ServeFlags {
  std::string address;  // [ADDR:]PORT; empty: not serving
  std::string token;    // empty: a random one, printed
  bool serving() const { return !address.empty(); }
};

void add_serve_flags(CLI::App* command, ServeFlags& flags);

// What no viewer may do to a served run (rewind, fork), and why; the GUI greys these out with the reason.
std::map<std::string, std::string> refused_from_viewers();

// Binds (a port in use is a one-line error) and adds the server to the source's sinks; start it
// with the source. `refused` adds to refused_from_viewers(). Prints on stderr where it serves and
// the command that attaches.
std::shared_ptr<model::RemoteServer> serve(model::TimelineSource& source, const ServeFlags& flags, const std::string& label,
                                           std::map<std::string, std::string> refused = {},
                                           std::function<model::Command(const model::Command&)> admit = {});

}  // namespace memscope::app
