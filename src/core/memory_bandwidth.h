// The host's memory read bandwidth, measured now: the roof a decode step is held against. Decode
// of one sequence reads every active weight byte (and the KV of its context) once per token, so
// tokens/s x bytes/token over this rate says how far a kernel is from the machine's limit. On a
// shared host the rate moves (29-80 GB/s seen in one session), so `fak bench` measures it in the
// same run as the tokens it compares.
#pragma once

#include <cstddef>

namespace fak {

// GB/s (1e9 bytes) of a streaming read split over the current OpenMP threads, of data that is not
// in any cache: `reps` timed passes of `pass_bytes` each, taken in turn from a pool of `pool_bytes`
// (after one untimed pass), so a byte is read again only after the whole pool has been. Their
// median, not the best: a decode test is an average over many steps, and on a shared host single
// passes of a few milliseconds swing (33-80 GB/s); the best of them was a burst the decode beside
// it could not hold (it read "102%" of it in session 24).
// Why a pool: rereading one buffer is not a memory read. On this project's host (Zen 5 EPYC, a
// VM) a reread buffer partly streams from the last-level cache: in one membw_bench run (session
// 27, bench/RESULTS.md) 128 MiB read again and again streamed 60.0 GiB/s and 256 MiB 54.3, where
// 128 MiB passes from a 1 GiB pool streamed 50.7. Decode of a model bigger than the cache, and of
// MoE experts that change every token, gets the last figure.
double measure_read_bandwidth(size_t pool_bytes = size_t(512) << 20,
                              size_t pass_bytes = size_t(128) << 20, int reps = 3);

// The pool measure_read_bandwidth may take when `available` bytes of memory are free (0: not
// known): its 512 MiB default, or 0 (do not probe) where that would leave less than 1 GiB free, as
// writing it would push the model being measured out to swap or the process into the OOM killer.
size_t probe_pool_bytes(size_t available);

}  // namespace fak
