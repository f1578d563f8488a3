// The rendezvous store a launcher hosts for the ranks it starts (`train --nproc`), as torchrun's
// agent does: a c10d TCPStore server on a free loopback port, alive as long as this object.
// The ranks find it through MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE (model/dist/launch_env.h).
#pragma once
#include <memory>

namespace memscope::model {

class RendezvousStore {
 public:
  RendezvousStore();  // throws a UserError when no port can be bound
  ~RendezvousStore();
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memscope::model
