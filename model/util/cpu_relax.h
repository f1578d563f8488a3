// cpu_relax(): one pause in a spin-wait loop. It tells an x86 core that the loop waits, so that it
// yields execution resources and leaves the loop without a memory-order flush when the flag flips.
// Elsewhere it does nothing.
#pragma once

namespace memscope::model {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace memscope::model
