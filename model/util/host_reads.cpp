#include "model/util/host_reads.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#ifdef MEMSCOPE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
constexpr const char* kToDevice = " (host to device)";
const char* crossing(const at::RecordFunction& fn, c10::DeviceType device) {
  if (device == c10::DeviceType::CPU || std::strcmp(fn.name(), "aten::copy_") != 0) return nullptr;
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor() ||
      !inputs[0].toTensor().defined() || !inputs[1].toTensor().defined())
    return nullptr;  // the op reports that itself
  const c10::DeviceType to = inputs[0].toTensor().device().type(),
                        from = inputs[1].toTensor().device().type();
  if (to == c10::DeviceType::CPU && from == device) return " (device to host)";
  if (to == device && from == c10::DeviceType::CPU) return kToDevice;
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
  // Reads named inside a backward whose wait c10 has not yet said (SyncWarnings::take).
  std::atomic<int64_t> backward_reads{0};
};
std::array<Slot, kSlots> slots;
std::mutex slots_lock;
std::condition_variable slot_freed;

// What a watch keeps of each thread that works for it: the ops running there, outermost first, and
// how deep the outermost of them named as a read lies (0: none is). A read is named with the op our
// code called ahead of it ("aten::index -> aten::nonzero"), since the read is often made inside
// another op, or inside the backward of one ("autograd::engine::evaluate_function: CumprodBackward0
// -> …").
struct ThreadOps {
  std::vector<const char*> running;
  size_t read_depth = 0;
};
template <int S>
thread_local ThreadOps thread_ops;

// How autograd's engine names the node it runs: a read under it is made in a backward.
constexpr const char* kBackward = "autograd::engine::evaluate_function";

void record(Slot& slot, const std::string& read) {
  std::lock_guard<std::mutex> lock(slot.lock);
  ++slot.reads[read];
}

template <int S>
std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  ThreadOps& here = thread_ops<S>;
  here.running.push_back(fn.name());
  Slot& slot = slots[S];
  const char* crossed = crossing(fn, slot.device);
  if (crossed || (reads_host(fn.name()) && touches(fn, slot.device))) {
    std::string read = std::string(fn.name()) + (crossed ? crossed : "");
    if (here.running.size() > 1) read = here.running.front() + (" -> " + read);
    // One wait per outermost read (an op within a named one, is_nonzero's _local_scalar_dense, is
    // the same wait), and none for a copy to the device, which c10 does not count as one.
    if (here.read_depth == 0) {
      here.read_depth = here.running.size();
      const bool to_device = crossed && std::strcmp(crossed, kToDevice) == 0;
      if (!to_device && std::strncmp(here.running.front(), kBackward, std::strlen(kBackward)) == 0)
        ++slot.backward_reads;
    }
    record(slot, read);
  }
  return nullptr;
}

template <int S>
void leave(const at::RecordFunction&, at::ObserverContext*) {
  ThreadOps& here = thread_ops<S>;
  if (here.running.empty()) return;  // an op begun before the watch has no entry
  here.running.pop_back();
  if (here.read_depth > here.running.size()) here.read_depth = 0;
}

struct Observer {
  at::RecordFunctionCallback::StartCallback enter;
  at::RecordFunctionCallback::EndCallback leave;
  ThreadOps& (*ops)();
};
template <int S>
ThreadOps& ops_of() {
  return thread_ops<S>;
}
constexpr Observer kObservers[kSlots] = {{enter<0>, leave<0>, ops_of<0>},
                                         {enter<1>, leave<1>, ops_of<1>},
                                         {enter<2>, leave<2>, ops_of<2>},
                                         {enter<3>, leave<3>, ops_of<3>}};

// A call that waits for the GPU outside the ops above: c10 says so itself, in its sync debug mode
// (on while a watch of a CUDA device lives), with this warning, for the copies that synchronise
// (item(), .cpu()) and a stream's synchronise, though not for a device-wide synchronise or an
// event's. It is what the list above cannot foresee. Autograd holds back the warnings of a backward
// and says them on the watching thread when the backward ends, where no op runs: such a warning is
// taken as the wait of a read already named in that backward, while one is left, else named
// without its op.
constexpr const char* kSyncWarning = "called a synchronizing CUDA operation";
constexpr const char* kWaits = " (a synchronising CUDA call)";
constexpr const char* kNoOp = "outside any ATen op, or in a backward";

#if TORCH_VERSION_MAJOR >= 2
namespace warnings = c10::WarningUtils;
#else
namespace warnings = c10::Warning;
#endif

// Takes the watching thread's warnings while its watch lives: c10's sync warnings become reads,
// and every other warning goes on to the handler that was there before, unchanged. A watch within
// another on the same thread passes c10's warnings on to the outer one's too.
class SyncWarnings : public c10::WarningHandler {
 public:
  SyncWarnings(Slot& slot, ThreadOps& ops)
      : slot_(slot), ops_(ops), before_(warnings::get_warning_handler()) {
    warnings::set_warning_handler(this);
  }
  // On the watching thread: hands the handler back.
  ~SyncWarnings() override { warnings::set_warning_handler(before_); }
  // A watch ended on another thread cannot hand the watching thread's handler back: it stays, and
  // passes every warning on from now on.
  void orphan() { orphaned_ = true; }  // from the other thread

#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override {
    if (!take(warning.msg())) before_->process(warning);
  }
#else
  void process(const c10::SourceLocation& at, const std::string& message, bool verbatim) override {
    if (!take(message)) before_->process(at, message, verbatim);
  }
#endif

 private:
  // Whether `message` is c10's sync warning, recorded as a read unless the op it comes from was
  // named as one already (item()'s copy to the host synchronises, and is one read, not two).
  bool take(const std::string& message) {
    if (orphaned_ || message.find(kSyncWarning) == std::string::npos) return false;
    const std::vector<const char*>& running = ops_.running;
    if (ops_.read_depth == 0 && !(running.empty() && took_backward_read())) {
      std::string read = running.empty() ? std::string(kNoOp) : running.back();
      if (running.size() > 1) read = running.front() + (" -> " + read);
      record(slot_, read + kWaits);
    }
    if (auto* outer = dynamic_cast<SyncWarnings*>(before_)) outer->take(message);
    return true;
  }

  bool took_backward_read() {
    int64_t left = slot_.backward_reads.load();
    while (left > 0 && !slot_.backward_reads.compare_exchange_weak(left, left - 1)) {
    }
    return left > 0;
  }

  Slot& slot_;
  ThreadOps& ops_;
  c10::WarningHandler* before_;
  std::atomic<bool> orphaned_{false};
};

// c10's sync debug mode is one switch for the process: on while any watch of a CUDA device lives.
class SyncDebugMode {
 public:
  SyncDebugMode() {
#ifdef MEMSCOPE_CUDA
    std::lock_guard<std::mutex> lock(lock_);
    if (watches_++ == 0) {
      before_ = c10::cuda::warning_state().get_sync_debug_mode();
      if (before_ == c10::cuda::SyncDebugMode::L_DISABLED)
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    }
#endif
  }
  ~SyncDebugMode() {
#ifdef MEMSCOPE_CUDA
    std::lock_guard<std::mutex> lock(lock_);
    // As it was, unless someone else set it meanwhile. (c10's switch is a plain field, read by every
    // thread: as racy here as torch.cuda.set_sync_debug_mode.)
    if (--watches_ == 0 &&
        c10::cuda::warning_state().get_sync_debug_mode() == c10::cuda::SyncDebugMode::L_WARN)
      c10::cuda::warning_state().set_sync_debug_mode(before_);
#endif
  }
  SyncDebugMode(const SyncDebugMode&) = delete;
  SyncDebugMode& operator=(const SyncDebugMode&) = delete;

 private:
#ifdef MEMSCOPE_CUDA
  static inline std::mutex lock_;
  static inline int watches_ = 0;
  static inline c10::cuda::SyncDebugMode before_ = c10::cuda::SyncDebugMode::L_DISABLED;
#endif
};

}  // namespace

struct HostReadWatch::Impl {
  int slot = -1;
  at::CallbackHandle handle = 0;
  std::thread::id watcher = std::this_thread::get_id();
  // A CUDA device's only: c10's word that a call waited for the GPU.
  std::optional<SyncDebugMode> sync_mode;
  std::unique_ptr<SyncWarnings> sync_warnings;
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
    slot.backward_reads = 0;
  }
  // Thread-local, so other threads' work is not counted; autograd carries it to its own threads.
  impl_->handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(kObservers[impl_->slot].enter, kObservers[impl_->slot].leave)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION}));
  // What an earlier watch on this slot left on this thread (one ended inside an op) is not ours.
  ThreadOps& here = kObservers[impl_->slot].ops();
  here = ThreadOps();
  if (device == c10::DeviceType::CUDA) {
    impl_->sync_warnings = std::make_unique<SyncWarnings>(slots[impl_->slot], here);
    impl_->sync_mode.emplace();
  }
}

HostReadWatch::~HostReadWatch() {
  impl_->sync_mode.reset();
  if (std::this_thread::get_id() != impl_->watcher) {
    // Ended on another thread: the watching thread's observer and handler cannot be taken back from
    // here (a thread-local callback is removed by its own thread). Both stay, the handler passing
    // every warning on, and the slot stays taken, so no later watch collects that thread's reads.
    std::cerr << "memscope: a host-read watch ended on a thread other than its own; its slot is left "
                 "taken\n";
    if (impl_->sync_warnings) {
      impl_->sync_warnings->orphan();
      (void)impl_->sync_warnings.release();
    }
    return;
  }
  impl_->sync_warnings.reset();
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
