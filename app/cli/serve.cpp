#include "app/cli/serve.h"

#include <unistd.h>

#include <iostream>

namespace memscope::app {

void add_serve_flags(CLI::App* command, ServeFlags& flags) {
  command->add_option("--serve", flags.address,
                      "Serve the run to viewers on [ADDR:]PORT (loopback unless ADDR is given; port 0 picks a free "
                      "one): memscope --attach HOST:PORT --token T shows it and drives it");
  command->add_option("--token", flags.token, "The token a viewer must give (default: a random one, printed at start)");
}

std::map<std::string, std::string> refused_from_viewers() {
  const std::string why = "the run belongs to the process that serves it; a viewer does not branch or rewind its history "
                          "(record it, then rewind and fork in the replay)";
  return {{model::command_name(model::Command::Kind::Rewind), why}, {model::command_name(model::Command::Kind::Fork), why}};
}

std::shared_ptr<model::RemoteServer> serve(model::TimelineSource& source, const ServeFlags& flags, const std::string& label,
                                           std::map<std::string, std::string> refused,
                                           std::function<model::Command(const model::Command&)> admit) {
  model::ServeOptions o;
  o.endpoint = model::parse_serve_address(flags.address);
  o.token = flags.token;
  o.server = "memscope-cli " + label + " (pid " + std::to_string(::getpid()) + ")";
  o.label = label;
  o.refused = refused_from_viewers();
  o.refused.insert(refused.begin(), refused.end());
  o.admit = std::move(admit);
  auto server = std::make_shared<model::RemoteServer>(source, o);
  source.add_sink(server);
  const std::string where = server->endpoint().text();
  std::cerr << "serving " << label << " on " << where << " (token " << server->token() << "): memscope --attach " << where
            << " --token " << server->token() << std::endl;
  return server;
}

}  // namespace memscope::app
