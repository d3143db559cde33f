// Where a forward pass spends its time, by part of the model, and the weight bytes each part reads
// (fak bench --profile: a decode step's time and bandwidth per part, against the probed roof).
// Off unless a profile is installed; when off, each part costs one relaxed atomic load.
//
// note: the parts are timed around the backend's calls, which on the CPU return when the work is
// done; a GPU backend queues its work, so there the times are launch times (the profile is for
// the CPU).
#pragma once

#include <array>
#include <cstdint>

namespace fak {

enum class ForwardPart : uint8_t {
  Embed,         // embedding lookups (and their scale)
  Norms,         // the residual stream's RMSNorms and adds
  AttnProj,      // attention's q/k/v and output projections (biases, q/k norms, the gate)
  Attention,     // RoPE, the KV writes, attention over the cache
  DeltaNet,      // a Gated DeltaNet layer, whole
  Mlp,           // a dense MLP
  Router,        // a MoE layer's router and routing
  Experts,       // its routed experts
  SharedExpert,  // its shared expert (and gate)
  Head,          // the final norm and the output head
  kCount,
};
const char* forward_part_name(ForwardPart p);

struct ForwardPartStat {
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;  // weight bytes read (routed experts: the distinct experts a call used)
};
using ForwardProfile = std::array<ForwardPartStat, size_t(ForwardPart::kCount)>;

// Installs `profile` (null: none) for every later forward pass, on every thread; the caller keeps
// it alive until it installs another or null, and installs none while a pass runs.
void set_forward_profile(ForwardProfile* profile);

}  // namespace fak
