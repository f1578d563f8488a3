// SnapshotBuffers: the value buffers of the next frame's matrix snapshots (M, S and ΔM, SPEC §8),
// allocated and written ahead, a few at a time, by the engine thread over the frames before it
// (issue 20). Not thread-safe: the probes take buffers on snapshot frames, the engine prepares
// them on the others.
//
// Why: a snapshot frame keeps its copies in the engine's frame ring, and until the ring is full
// each copy is new memory whose pages fault in on their first write. A Titans-MLP snapshot frame
// (48 matrices of 16×64, 196 KB, one frame in eight) took 37 faults and about 210 µs on the AMD
// VM, against 31 µs when the memory was reused (probe_breakdown). On the side thread that one
// token outlasted the engine thread's step, which then waited for it. Made ahead, the faults fall
// over the frames before it; made on the engine thread, they come from its heap, which is advised
// huge pages (model/util/allocator.h), where the probes' thread's own malloc arena grows 4 KB at a
// time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace memscope::model {

class SnapshotBuffers {
 public:
  // A buffer of `floats` values, all zero: one made ahead when there is one of that size, else new.
  std::vector<float> take(std::size_t floats);
  // After a snapshot frame: what it took, size by size, is what prepare() makes ready for the next;
  // buffers beyond that are let go.
  void frame_done();
  // Makes part of what the next snapshot frame will take: the missing buffers divided over the
  // `frames_left` frames up to it (this one included), at least one.
  void prepare(int64_t frames_left);
  // Buffers ready now, for tests.
  std::size_t ready() const;

 private:
  std::map<std::size_t, std::vector<std::vector<float>>> ready_;  // by size
  std::map<std::size_t, std::size_t> taken_;                      // by size, in this frame
  std::map<std::size_t, std::size_t> wanted_;                     // by size, in the last snapshot frame
};

// A buffer of `floats` zeros from `buffers` (made ahead where it has one), or new when there are no
// buffers (the probes called outside the engine).
inline std::vector<float> snapshot_buffer(SnapshotBuffers* buffers, std::size_t floats) {
  return buffers ? buffers->take(floats) : std::vector<float>(floats);
}

}  // namespace memscope::model
