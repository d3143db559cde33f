// Parity against HF transformers references: a safetensors file with cases caseK.input_ids,
// caseK.logits ([T][vocab], every prompt position) and optionally caseK.greedy_ids.
//
// Checks, per case: (1) logits at every position within `tolerance` absolute; (2) argmax equal at
// every position whose reference top-1/top-2 margin exceeds the tolerance (smaller margins are
// genuine near-ties: reported, not failed); (3) the decode path (KV cache, one token at a time)
// fed the reference greedy ids predicts each next id unless fak's own margin is a near-tie; (4)
// free-running greedy reproduces the reference ids up to the first such near-tie.
#pragma once

#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace fak {

class TensorStore;

struct ParityCase {
  std::string name;
  int n_tokens = 0;
  double max_abs_diff = 0;  // over every logit of every position
  double min_cosine = 1;    // worst position's cosine similarity
  int argmax_agree = 0, argmax_total = 0;
  std::vector<int> near_ties;          // positions with reference margin <= tolerance
  std::vector<int> argmax_mismatches;  // disagreements outside near-ties (failures)
  int greedy_total = 0;                // reference greedy ids (0 when the case has none)
  int teacher_forced_agree = 0;
  std::vector<int> greedy_near_ties;   // decode steps where fak's margin <= tolerance
  std::vector<int> greedy_mismatches;  // failures
  int free_run_match = 0;              // leading ids equal to the reference when free-running
  bool free_run_ok = true;
  bool pass = false;
};

struct ParityReport {
  std::vector<ParityCase> cases;
  double tolerance = 1e-3;
  bool pass = false;
};

// kv: the KV cache the forward writes (f32 by default: the float64 references' own precision;
// `fak parity --kv-type` measures what a smaller KV costs against them).
ParityReport run_parity(std::shared_ptr<const Model> model, const TensorStore& reference,
                        double tolerance = 1e-3, KvCacheOptions kv = {});

}  // namespace fak
