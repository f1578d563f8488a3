#include "model/util/host_reads.h"

#include <ATen/record_function.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace memscope::model {

namespace {

// The ops whose result the host needs before it can go on: a copy of the values (item() calls
// _local_scalar_dense), or an output size only the data decides (nonzero, and through it boolean
// indexing and masked_select; unique). Nested calls are seen too, so an op built on these is
// caught through them.
constexpr const char* kHostReads[] = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::is_nonzero",
    "aten::equal",
};

bool reads_host(const char* name) {
  for (const char* op : kHostReads)
    if (std::strcmp(name, op) == 0) return true;
  return false;
}

// A copy between the watched device and the host: device to host is a read the host waits for;
// host to device, recorded into a graph, would copy whatever that host memory holds at each replay
// (and from pageable memory it cannot be recorded at all). Never said for the CPU, whose copies
// stay on the host. copy_(self, src, non_blocking) is what every .to(), .cpu() and copy comes to.
const char* crossing(const at::RecordFunction& fn, c10::DeviceType device) {
  if (device == c10::DeviceType::CPU || std::strcmp(fn.name(), "aten::copy_") != 0) return nullptr;
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor() ||
      !inputs[0].toTensor().defined() || !inputs[1].toTensor().defined())
    return nullptr;  // the op reports that itself
  const c10::DeviceType to = inputs[0].toTensor().device().type(),
                        from = inputs[1].toTensor().device().type();
  if (to == c10::DeviceType::CPU && from == device) return " (device to host)";
  if (to == device && from == c10::DeviceType::CPU) return " (host to device)";
  return nullptr;
}

bool touches(const at::RecordFunction& fn, c10::DeviceType device) {
  for (const c10::IValue& input : fn.inputs())
    if (input.isTensor() && input.toTensor().defined() && input.toTensor().device().type() == device)
      return true;
  return false;
}

// An observer is a plain function, so each watch takes one of a few slots, each with its own
// observer: a thread's observer fires for that thread's work alone (and autograd's on its behalf),
// so it knows whose reads it saw. A watch finding every slot taken waits for one.
constexpr int kSlots = 4;
struct Slot {
  bool taken = false;
  c10::DeviceType device = c10::DeviceType::CPU;
  std::mutex lock;  // the observer may run on an autograd thread beside the watching one
  std::map<std::string, int64_t> reads;
};
std::array<Slot, kSlots> slots;
std::mutex slots_lock;
std::condition_variable slot_freed;

// The ops running on this thread, outermost first. A read is named with the op our code called
// ahead of it ("aten::index -> aten::nonzero"), since the read is often made inside another op,
// or inside the backward of one ("autograd::engine::evaluate_function: CumprodBackward0 -> …").
template <int S>
thread_local std::vector<const char*> running;

template <int S>
std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  std::vector<const char*>& ops = running<S>;
  ops.push_back(fn.name());
  Slot& slot = slots[S];
  const char* crossed = crossing(fn, slot.device);
  if (crossed || (reads_host(fn.name()) && touches(fn, slot.device))) {
    std::string read = std::string(fn.name()) + (crossed ? crossed : "");
    if (ops.size() > 1) read = ops.front() + (" -> " + read);
    std::lock_guard<std::mutex> lock(slot.lock);
    ++slot.reads[read];
  }
  return nullptr;
}

template <int S>
void leave(const at::RecordFunction&, at::ObserverContext*) {
  if (!running<S>.empty()) running<S>.pop_back();  // an op begun before the watch has no entry
}

struct Observer {
  at::RecordFunctionCallback::StartCallback enter;
  at::RecordFunctionCallback::EndCallback leave;
};
constexpr Observer kObservers[kSlots] = {
    {enter<0>, leave<0>}, {enter<1>, leave<1>}, {enter<2>, leave<2>}, {enter<3>, leave<3>}};

}  // namespace

struct HostReadWatch::Impl {
  int slot = -1;
  at::CallbackHandle handle = 0;
};

HostReadWatch::HostReadWatch(c10::DeviceType device) : impl_(std::make_unique<Impl>()) {
  {
    std::unique_lock<std::mutex> lock(slots_lock);
    auto free_slot = [&] {
      for (int s = 0; s < kSlots; ++s)
        if (!slots[s].taken) return s;
      return -1;
    };
    slot_freed.wait(lock, [&] { return free_slot() >= 0; });
    impl_->slot = free_slot();
    Slot& slot = slots[impl_->slot];
    slot.taken = true;
    slot.device = device;
    slot.reads.clear();
  }
  // Thread-local, so other threads' work is not counted; autograd carries it to its own threads.
  impl_->handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(kObservers[impl_->slot].enter, kObservers[impl_->slot].leave)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION}));
}

HostReadWatch::~HostReadWatch() {
  at::removeCallback(impl_->handle);
  {
    std::lock_guard<std::mutex> lock(slots_lock);
    slots[impl_->slot].taken = false;
  }
  slot_freed.notify_one();
}

std::map<std::string, int64_t> HostReadWatch::reads() const {
  Slot& slot = slots[impl_->slot];
  std::lock_guard<std::mutex> lock(slot.lock);
  return slot.reads;
}

std::string HostReadWatch::summary() const {
  std::string out;
  for (const auto& [op, calls] : reads())
    out +=
        (out.empty() ? "" : ", ") + op + " (" + std::to_string(calls) + (calls == 1 ? " call)" : " calls)");
  return out;
}

}  // namespace memscope::model
