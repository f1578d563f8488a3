// Which knobs a model does not use. The registry lists every knob; a HOPE model, for one, reads
// only memory.lr.max and memory.inner.clip of the memory rule (its self-modifying memories have
// their own rule, SPEC §7), and a model without attention ignores the attention knobs. The GUI's
// knobs panel hides these unless asked, and says why when it shows them.
#pragma once
#include <string>

namespace memscope::model {

struct Knob;
struct Preset;

// Empty when `preset`'s model reads the knob; otherwise one line saying why it does not.
std::string knob_unused_reason(const Knob& knob, const Preset& preset);

}  // namespace memscope::model
