// The host's memory read bandwidth, measured now: the roof a decode step is held against. Decode
// of one sequence reads every active weight byte (and the KV of its context) once per token, so
// tokens/s x bytes/token over this rate says how far a kernel is from the machine's limit. On a
// shared host the rate moves (29-80 GB/s seen in one session), so `fak bench` measures it in the
// same run as the tokens it compares.
#pragma once

#include <cstddef>

namespace fak {

// GB/s (1e9 bytes) of a streaming read of `bytes` split over the current OpenMP threads: the
// median of `reps` passes after one untimed pass that faults the buffer in. The median, not the
// best: a decode test is an average over many steps, and on a shared host single passes of a few
// milliseconds swing (33-80 GB/s); the best of them was a burst the decode beside it could not
// hold (it read "102%" of it in session 24).
double measure_read_bandwidth(size_t bytes = size_t(512) << 20, int reps = 5);

}  // namespace fak
