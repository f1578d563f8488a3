// Whether handing the side thread its job still pays (engine.overlap): a probed token's probes
// (SideJob::Probes), or the next token's step (SideJob::NextToken). The overlap assumes a second
// core that runs the side thread when it is handed a job. On a machine that is busy with something
// else, or a VM whose second vCPU the host runs only now and then, that core is not there: the
// side thread waits its turn for milliseconds, and the engine thread waits for it after every
// step. With one busy process beside it on the 2-vCPU CI VM, demo-mqar with its probes stepped
// 970-1,070 tokens/s overlapped against 3,337-3,588 with the probes measured in line (README "The
// two vCPUs, shared or not").
//
// So the engine keeps score. After each overlapped token it tells the gauge how long it waited for
// the side thread once its own part was done, and how long the side's job itself ran. Done on the
// engine thread, the job would cost about its own time, so a token whose wait is longer was late:
// the side thread had not even started its job when the engine was done with its part. When half
// the tokens of a window are late, the overlap is losing (one late token is a hiccup that no
// back-off would have spared). Then the engine thread does the job itself for a while
// (kFirstBackOff probed tokens, doubling each time the overlap loses again, up to kMaxBackOff),
// then a few tokens are overlapped again to see; each whole window that pays halves the next
// back-off. The side thread is given no job meanwhile, so it soon sleeps (SideThread's spin
// budget) and leaves the core to whoever has it.
//
// Plain arithmetic, no clock: the branch measures and passes the times in (tests feed their own).
#pragma once

#include <algorithm>
#include <cstdint>

namespace memscope::model {

class OverlapGauge {
 public:
  static constexpr int kWindow = 8;       // overlapped tokens a verdict takes
  static constexpr int kRetryWindow = 3;  // and after a back-off, to see whether it still loses
  static constexpr int64_t kFirstBackOff = 32;
  static constexpr int64_t kMaxBackOff = 4096;

  // Whether to overlap this probed token; a token measured in line counts down the back-off.
  bool overlap_next() {
    if (back_off_left_ == 0) return true;
    --back_off_left_;
    ++in_line_;
    return false;
  }

  // After an overlapped token: seconds the engine waited for the side thread after its own part,
  // and seconds the side thread's job ran.
  void overlapped(double waited, double job) {
    if (!adapts_) return;
    late_ += waited > job;  // the side thread had not even started its job when the engine was done
    if (++samples_ < (retrying_ ? kRetryWindow : kWindow)) return;
    const bool losing = 2 * late_ >= samples_;
    samples_ = late_ = 0;
    if (losing) {
      back_off_left_ = next_back_off_;
      next_back_off_ = std::min(2 * next_back_off_, kMaxBackOff);
      ++back_offs_;
      retrying_ = true;
    } else if (retrying_) {
      retrying_ = false;  // a whole window more to ease the next back-off
    } else {
      next_back_off_ = std::max(next_back_off_ / 2, kFirstBackOff);
    }
  }

  // Off: no verdicts from here on (a back-off under way runs out), so that a test or a bench knows
  // which tokens are overlapped.
  void set_adapts(bool on) { adapts_ = on; }

  int64_t tokens_in_line() const { return in_line_; }  // probed tokens whose job the engine did, backing off
  int64_t back_offs() const { return back_offs_; }
  bool backing_off() const { return back_off_left_ > 0; }

 private:
  bool adapts_ = true;
  int64_t samples_ = 0, late_ = 0;  // overlapped tokens since the last verdict, and how many were late
  bool retrying_ = false;           // the last verdict was a back-off
  int64_t back_off_left_ = 0;       // probed tokens still to measure in line
  int64_t next_back_off_ = kFirstBackOff;
  int64_t in_line_ = 0, back_offs_ = 0;
};

}  // namespace memscope::model
