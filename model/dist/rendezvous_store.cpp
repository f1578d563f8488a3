#include "model/dist/rendezvous_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "model/util/errors.h"

namespace memscope::model {

struct RendezvousStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

RendezvousStore::RendezvousStore() : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions o;
  o.port = 0;  // the kernel picks a free port: no race with another run for a fixed one
  o.isServer = true;
  o.waitWorkers = false;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    throw UserError("--nproc: cannot host the rendezvous store: " + one_line(e.what()));
  }
}

RendezvousStore::~RendezvousStore() = default;

int RendezvousStore::port() const { return impl_->store->getPort(); }

}  // namespace memscope::model
