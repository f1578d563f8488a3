#include "model/dist/data_parallel.h"

#include <ATen/ATen.h>
#include <signal.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// Gloo needs its own headers (Debian: libgloo-dev) and LibTorch built with it (USE_C10D_GLOO in
// its flags; model/CMakeLists.txt defines it for pip's LibTorch, which ships Gloo's headers). A LibTorch without them still builds memscope; only CPU training across processes
// then says it is unavailable.
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define MEMSCOPE_GLOO 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/version.h>
#include <unistd.h>
#if defined(MEMSCOPE_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define MEMSCOPE_NCCL 1
#endif
// c10d reports its retries and failures through glog, several lines each; memscope says what
// went wrong in one line instead (MEMSCOPE_DIST_DEBUG=1 keeps c10d's own log).
#if defined(C10_USE_GLOG) && __has_include(<glog/logging.h>)
#include <glog/logging.h>
#define MEMSCOPE_QUIET_GLOG 1
#endif

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <functional>
#include <thread>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

// LibTorch 2.x moved the collectives from ProcessGroup to Backend; the calls are the same.
#if TORCH_VERSION_MAJOR >= 2
using GroupBase = c10d::Backend;
#else
using GroupBase = c10d::ProcessGroup;
#endif

using Clock = std::chrono::steady_clock;

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// A process that has exited, or is a zombie its parent has not reaped yet, is not alive.
bool process_alive(int pid) {
  if (pid <= 0) return true;  // unknown: do not accuse it
  if (kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

// 63 bits of FNV-1a over a tensor's bytes (63 so that an int64 all-gather never sees a sign flip).
int64_t content_hash(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0, n = c.nbytes(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

// The rendezvous failures a user can act on, said in their terms. `joining_store`: the failure
// came while connecting to (or hosting) the store, not while waiting for the other ranks.
std::string rendezvous_error(const LaunchEnv& env, const DataParallelOptions& o, bool joining_store,
                             const std::string& what) {
  const std::string first = one_line(what);
  const std::string at = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string who = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  const std::string seconds = std::to_string(o.timeout.count() / 1000) + " s";
  if (first.find("Address already in use") != std::string::npos || first.find("EADDRINUSE") != std::string::npos)
    return who + ": MASTER_PORT " + std::to_string(env.master_port) +
           " is already in use on this machine (another run holds it: choose another port)";
  if (joining_store)
    return who + ": cannot reach the rendezvous at " + at + " within " + seconds +
           " (is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?) [" + first + "]";
  if (first.find("imeout") != std::string::npos || first.find("timed out") != std::string::npos)
    return who + ": not all " + std::to_string(env.world_size) + " ranks joined the rendezvous at " + at + " within " +
           seconds + " (did every rank start, with the same WORLD_SIZE and MASTER_PORT?)";
  return who + ": rendezvous at " + at + " failed: " + first;
}

// Groups tensors into buckets of at most `bucket_bytes` (one tensor alone may be larger) and one
// dtype each, in reverse order: the order the backward produces gradients, as DDP's buckets.
// Returns the indices into `tensors`, bucket by bucket.
std::vector<std::vector<size_t>> bucket_layout(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t k = tensors.size(); k-- > 0;) {
    const at::Tensor& t = tensors[k];
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (buckets.empty() || filled + bytes > bucket_bytes || tensors[buckets.back().front()].scalar_type() != t.scalar_type()) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += bytes;
  }
  return buckets;
}

}  // namespace

// One bucket of gradients on its way through an all-reduce.
struct Bucket {
  std::vector<at::Tensor> grads;  // what is summed, and where the means go
  std::vector<size_t> hooked;     // with the overlap: the parameters (Overlap::parameters) they are of
  std::vector<at::Tensor> flat;   // one tensor: the collective's argument, alive until waited on
  c10::intrusive_ptr<c10d::Work> work;
};

// The gradient hooks of arm_gradient_overlap(): a fixed bucket layout over every parameter that
// requires a gradient (reverse order: the order the backward produces them).
struct Overlap {
  std::vector<at::Tensor> parameters;
  std::vector<unsigned> hooks;               // handles, removed with the group
  std::vector<size_t> bucket_of;             // per parameter
  std::vector<std::vector<size_t>> members;  // per bucket, parameter indices
  // Per arming:
  bool armed = false;
  std::vector<std::vector<at::Tensor>> seen;  // per bucket, the gradients the hooks have given
  std::vector<size_t> missing;                // per bucket, gradients still to come
  size_t next = 0;                            // the next bucket to start: strictly in order
};

struct DataParallel::Impl {
  LaunchEnv env;
  DataParallelOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<GroupBase> group;
  std::string backend = "gloo";
  std::vector<std::pair<std::string, int>> peers;  // (host, pid) of every rank
  int64_t step = 0;
  CommunicationStats stats;

  std::string who() const {
    return "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
           (step > 0 ? ", step " + std::to_string(step) : "");
  }

  // Which ranks have died, by their pids on this machine. A dying peer's sockets close a moment
  // before its process is gone, so look for up to a second.
  std::string who_is_gone() const {
    const std::string here = host_name();
    for (int attempt = 0; attempt < 10; ++attempt) {
      std::vector<int> gone;
      for (int r = 0; r < static_cast<int>(peers.size()); ++r)
        if (r != env.rank && peers[r].first == here && !process_alive(peers[r].second)) gone.push_back(r);
      if (!gone.empty()) {
        std::string s = gone.size() == 1 ? "rank " : "ranks ";
        for (size_t i = 0; i < gone.size(); ++i)
          s += (i ? ", " : "") + std::to_string(gone[i]) + " (pid " + std::to_string(peers[gone[i]].second) + ")";
        return s + (gone.size() == 1 ? " is gone" : " are gone");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (env.rank != 0 && !env.agent_store) return "rank 0 (which hosts the rendezvous) or another peer stopped answering";
    return "a peer rank stopped answering";
  }

  // Runs one collective; any failure becomes one line naming this rank, the step and the culprit.
  void collective(const char* what, const std::function<void()>& run) {
    const auto start = Clock::now();
    try {
      run();
    } catch (const UserError&) {
      throw;
    } catch (const std::exception& e) {
      throw UserError(who() + ": " + what + " failed: " + who_is_gone() + " (" + one_line(e.what()) + ")");
    }
    stats.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    ++stats.calls;
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work) { work->wait(options.timeout); }

  Overlap overlap;
  std::vector<Bucket> in_flight;  // started during the backward, finished by average_gradients

  ~Impl() {
    for (size_t i = 0; i < overlap.hooks.size(); ++i) overlap.parameters[i].remove_hook(overlap.hooks[i]);
  }

  // Packs `grads` into one buffer and starts its all-reduce.
  void start(Bucket& b) {
    std::vector<at::Tensor> views;
    for (const auto& g : b.grads) views.push_back(g.reshape(-1));
    b.flat = {at::cat(views)};
    stats.bytes += static_cast<int64_t>(b.flat[0].nbytes());
    b.work = group->allreduce(b.flat);
  }

  // Starts the complete buckets at the head of the order (or every one left, at the end).
  void start_ready(bool all) {
    while (overlap.next < overlap.members.size() && (all || overlap.missing[overlap.next] == 0)) {
      Bucket b;
      for (size_t k = 0; k < overlap.seen[overlap.next].size(); ++k)
        if (overlap.seen[overlap.next][k].defined()) {
          b.grads.push_back(overlap.seen[overlap.next][k]);
          b.hooked.push_back(overlap.members[overlap.next][k]);
        }
      ++overlap.next;
      if (b.grads.empty()) continue;  // a bucket with no gradient on any rank (the graph is the same)
      collective("all-reduce of the gradients", [&] { start(b); });
      in_flight.push_back(std::move(b));
    }
  }

  void on_gradient(size_t index, const at::Tensor& grad) {
    if (!overlap.armed) return;
    const size_t b = overlap.bucket_of[index];
    auto& slot = overlap.seen[b][static_cast<size_t>(
        std::find(overlap.members[b].begin(), overlap.members[b].end(), index) - overlap.members[b].begin())];
    if (slot.defined()) return;  // counted once (a hook fires once per backward for a leaf)
    slot = grad.detach();
    --overlap.missing[b];
    start_ready(false);
  }
};

bool gloo_available() {
#ifdef MEMSCOPE_GLOO
  return true;
#else
  return false;
#endif
}

DataParallel::DataParallel(const LaunchEnv& env, DataParallelOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.env = env;
  m.options = options;
#ifdef MEMSCOPE_QUIET_GLOG
  if (!std::getenv("MEMSCOPE_DIST_DEBUG")) FLAGS_minloglevel = google::GLOG_FATAL;
#elif !defined(C10_USE_GLOG)
  // LibTorch without glog (pip's 2.x) logs c10d's retries through c10's own logger.
  if (!std::getenv("MEMSCOPE_DIST_DEBUG")) ::FLAGS_caffe2_log_level = 3;  // FATAL only
#endif
  bool joining_store = true;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0 && !env.agent_store;
    so.waitWorkers = false;  // the process group's own rendezvous waits, with the same timeout
    so.timeout = options.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    // Our keys apart from a launcher's own (torchrun's agent writes to the same store).
    m.store = c10::make_intrusive<c10d::PrefixStore>("memscope", tcp);
    joining_store = false;
    const std::string me = host_name() + " " + std::to_string(::getpid());
    m.store->set("rank/" + std::to_string(env.rank), std::vector<uint8_t>(me.begin(), me.end()));

    if (options.cuda) {
#ifdef MEMSCOPE_NCCL
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options.timeout;
      m.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(m.store, env.rank, env.world_size, nccl_options);
      m.backend = "nccl";
#else
      throw UserError("rank " + std::to_string(env.rank) +
                      ": the model is on CUDA but this build has no NCCL (LibTorch without USE_C10D_NCCL)");
#endif
    }
    if (!m.group) {
#ifdef MEMSCOPE_GLOO
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
        gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(env.master_addr))
        gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      gloo_options->threads = 2;
      m.group = c10::make_intrusive<c10d::ProcessGroupGloo>(m.store, env.rank, env.world_size, gloo_options);
#else
      throw UserError("rank " + std::to_string(env.rank) +
                      ": this build has no c10d Gloo (LibTorch without USE_C10D_GLOO, or Gloo's headers missing)");
#endif
    }

    // Every rank's process, so that a failure can name the rank that died.
    for (int r = 0; r < env.world_size; ++r) {
      const auto bytes = m.store->get("rank/" + std::to_string(r));
      const std::string text(bytes.begin(), bytes.end());
      const size_t space = text.rfind(' ');
      m.peers.emplace_back(text.substr(0, space), std::atoi(text.c_str() + space + 1));
    }
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError(rendezvous_error(env, options, joining_store, e.what()));
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return impl_->env.rank; }
int DataParallel::world_size() const { return impl_->env.world_size; }
std::string DataParallel::backend() const { return impl_->backend; }
void DataParallel::set_step(int64_t step) { impl_->step = step; }
const CommunicationStats& DataParallel::stats() const { return impl_->stats; }

std::pair<int64_t, int64_t> DataParallel::shard(int64_t rows) const {
  const int64_t w = world_size();
  if (rows % w != 0)
    throw UserError("train.batch=" + std::to_string(rows) + " is not a multiple of the world size " + std::to_string(w) +
                    " (every rank must compute an equal share of the batch)");
  const int64_t share = rows / w;
  return {rank() * share, (rank() + 1) * share};
}

void DataParallel::broadcast_from_rank0(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().reshape(-1));
  std::vector<at::Tensor> buffer{at::cat(flat)};
  impl_->collective("broadcast of the parameters", [&] {
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    impl_->wait(impl_->group->broadcast(buffer, o));
  });
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(buffer[0].narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

void DataParallel::arm_gradient_overlap(const std::vector<at::Tensor>& parameters) {
  Overlap& o = impl_->overlap;
  if (o.parameters.empty()) {
    // The layout, fixed once: every parameter that takes a gradient, in buckets.
    for (const auto& p : parameters)
      if (p.requires_grad()) o.parameters.push_back(p);
    o.members = bucket_layout(o.parameters, impl_->options.bucket_bytes);
    o.bucket_of.resize(o.parameters.size());
    for (size_t b = 0; b < o.members.size(); ++b)
      for (const size_t index : o.members[b]) o.bucket_of[index] = b;
    Impl* impl = impl_.get();  // the hooks are removed in ~Impl, before it goes
    for (size_t index = 0; index < o.parameters.size(); ++index)
      o.hooks.push_back(o.parameters[index].register_hook([impl, index](const at::Tensor& g) { impl->on_gradient(index, g); }));
  }
  // A step that failed after its hooks started buckets (its backward threw) leaves them in
  // flight: finish them, so this step's buckets are the only ones average_gradients() sees.
  impl_->collective("all-reduce of the gradients", [&] {
    for (const Bucket& b : impl_->in_flight) impl_->wait(b.work);
  });
  impl_->in_flight.clear();
  o.armed = true;
  o.next = 0;
  o.seen.assign(o.members.size(), {});
  o.missing.clear();
  for (size_t b = 0; b < o.members.size(); ++b) {
    o.seen[b].resize(o.members[b].size());
    o.missing.push_back(o.members[b].size());
  }
}

void DataParallel::average_gradients(const std::vector<at::Tensor>& parameters) {
  at::NoGradGuard no_grad;
  Impl& m = *impl_;
  std::vector<Bucket> buckets;
  if (m.overlap.armed) {
    // The hooks started the buckets the backward completed; the rest (parameters without a
    // gradient this step) start now. The means go into .grad, which the backward has filled.
    m.start_ready(true);
    m.overlap.armed = false;
    buckets = std::move(m.in_flight);
    m.in_flight.clear();
    // A hook saw the gradient on its way into .grad; the mean goes into .grad itself.
    for (Bucket& b : buckets)
      for (size_t k = 0; k < b.grads.size(); ++k) b.grads[k] = m.overlap.parameters[b.hooked[k]].grad();
  }
  if (buckets.empty()) {
    std::vector<at::Tensor> grads;
    for (const auto& p : parameters)
      if (p.grad().defined()) grads.push_back(p.grad());
    for (const auto& members : bucket_layout(grads, m.options.bucket_bytes)) {
      buckets.emplace_back();
      for (const size_t k : members) buckets.back().grads.push_back(grads[k]);
    }
    m.collective("all-reduce of the gradients", [&] {
      for (Bucket& b : buckets) m.start(b);  // asynchronous: the next bucket packs meanwhile
    });
  }
  m.collective("all-reduce of the gradients", [&] {
    for (Bucket& b : buckets) m.wait(b.work);
  });
  const double w = world_size();
  for (Bucket& b : buckets) {
    at::Tensor mean = b.flat[0].div_(w);
    int64_t offset = 0;
    for (const auto& g : b.grads) {
      g.copy_(mean.narrow(0, offset, g.numel()).view(g.sizes()));
      offset += g.numel();
    }
  }
}

void DataParallel::sum(const at::Tensor& values) {
  std::vector<at::Tensor> v{values};
  impl_->collective("all-reduce of the step's loss", [&] { impl_->wait(impl_->group->allreduce(v)); });
}

bool DataParallel::any(bool flag) {
  std::vector<at::Tensor> v{at::full({1}, flag ? 1 : 0, at::kInt)};
  impl_->collective("all-reduce of the stop flag", [&] {
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    impl_->wait(impl_->group->allreduce(v, o));
  });
  return v[0].item<int>() != 0;
}

void DataParallel::check_identical(const std::vector<at::Tensor>& tensors, const std::vector<std::string>& names) {
  const auto n = static_cast<int64_t>(tensors.size());
  std::vector<at::Tensor> mine{at::empty({n}, at::kLong)};
  for (int64_t i = 0; i < n; ++i) mine[0][i] = content_hash(tensors[static_cast<size_t>(i)]);
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < world_size(); ++r) all[0].push_back(at::empty({n}, at::kLong));
  impl_->collective("all-gather of the parameter checksums", [&] { impl_->wait(impl_->group->allgather(all, mine)); });
  for (int r = 1; r < world_size(); ++r) {
    const at::Tensor differs = all[0][static_cast<size_t>(r)].ne(all[0][0]);
    if (!differs.any().item<bool>()) continue;
    const int64_t first = differs.nonzero()[0][0].item<int64_t>();
    const std::string name = first < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(first)] : "?";
    throw UserError(impl_->who() + ": parameters differ across ranks: '" + name + "' on rank " + std::to_string(r) +
                    " is not rank 0's (" + std::to_string(differs.sum().item<int64_t>()) + " of " + std::to_string(n) +
                    " tensors differ; a rank ran other code, data or settings)");
  }
}

}  // namespace memscope::model
