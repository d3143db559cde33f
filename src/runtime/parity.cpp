#include "runtime/parity.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"
#include "runtime/model_cache.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace fak {

namespace {

// Top-1 minus top-2 of a row.
double margin(const float* row, int n) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return double(a) - double(b);
}

std::vector<int32_t> to_i32(const std::vector<int64_t>& v, const std::string& what, int vocab) {
  std::vector<int32_t> out;
  for (int64_t x : v) {
    if (x < 0 || x >= vocab)
      fail(what + " holds token id " + std::to_string(x) + " outside the model's vocabulary");
    out.push_back(int32_t(x));
  }
  return out;
}

ParityCase run_case(const std::shared_ptr<const Model>& model, const TensorStore& ref,
                    const std::string& name, double tol, const KvCacheOptions& kv) {
  const int vocab = model->config().vocab;
  ParityCase pc;
  pc.name = name;
  const auto ids = to_i32(read_i64(ref.get(name + ".input_ids")), name + ".input_ids", vocab);
  const TensorInfo& logits_t = ref.get(name + ".logits");
  if (logits_t.shape.size() != 2 || logits_t.shape[0] != int64_t(ids.size()) ||
      logits_t.shape[1] != vocab)
    fail(ref.source().string() + ": " + name + ".logits has shape " + logits_t.shape_string() +
         ", expected [" + std::to_string(ids.size()) + ", " + std::to_string(vocab) + "]");
  const std::vector<float> want = read_f32(logits_t);
  pc.n_tokens = int(ids.size());

  auto cache = make_kv_cache(*model, kv);
  Session s(model, cache);
  std::vector<float> got;
  s.append(ids, &got);
  for (int t = 0; t < pc.n_tokens; ++t) {
    const float* g = &got[size_t(t) * size_t(vocab)];
    const float* w = &want[size_t(t) * size_t(vocab)];
    double dot = 0, ng = 0, nw = 0;
    for (int i = 0; i < vocab; ++i) {
      pc.max_abs_diff = std::max(pc.max_abs_diff, std::fabs(double(g[i]) - double(w[i])));
      dot += double(g[i]) * w[i];
      ng += double(g[i]) * g[i];
      nw += double(w[i]) * w[i];
    }
    pc.min_cosine = std::min(pc.min_cosine, dot / std::sqrt(ng * nw + 1e-300));
    ++pc.argmax_total;
    const bool agree = argmax({g, size_t(vocab)}) == argmax({w, size_t(vocab)});
    if (agree) ++pc.argmax_agree;
    if (margin(w, vocab) <= tol) {
      pc.near_ties.push_back(t);
    } else if (!agree) {
      pc.argmax_mismatches.push_back(t);
    }
  }

  if (const TensorInfo* g = ref.find(name + ".greedy_ids")) {
    const auto greedy = to_i32(read_i64(*g), name + ".greedy_ids", vocab);
    pc.greedy_total = int(greedy.size());
    // Teacher-forced through the decode path: one token at a time from the prompt's cache.
    Session tf = s.clone();
    int first_tie = pc.greedy_total;
    for (int i = 0; i < pc.greedy_total; ++i) {
      const auto& l = tf.logits();
      const bool agree = argmax(l) == greedy[size_t(i)];
      if (agree) ++pc.teacher_forced_agree;
      if (margin(l.data(), vocab) <= tol) {
        pc.greedy_near_ties.push_back(i);
        first_tie = std::min(first_tie, i);
      } else if (!agree) {
        pc.greedy_mismatches.push_back(i);
      }
      if (i + 1 < pc.greedy_total) tf.append({&greedy[size_t(i)], 1});
    }
    // Free-running greedy: must reproduce the reference up to the first near-tie. note: over
    // every lm_head row, padded ones included (not Session::sampleable_logits), as HF's greedy
    // reference is.
    Session fr = s.clone();
    for (int i = 0; i < pc.greedy_total; ++i) {
      const int32_t next = argmax(fr.logits());
      if (next != greedy[size_t(i)]) break;
      ++pc.free_run_match;
      if (i + 1 < pc.greedy_total) fr.append({&next, 1});
    }
    pc.free_run_ok = pc.free_run_match >= first_tie;
  }
  pc.pass = pc.max_abs_diff <= tol && pc.argmax_mismatches.empty() &&
            pc.greedy_mismatches.empty() && pc.free_run_ok;
  return pc;
}

}  // namespace

ParityReport run_parity(std::shared_ptr<const Model> model, const TensorStore& reference,
                        double tolerance, KvCacheOptions kv) {
  ParityReport r;
  r.tolerance = tolerance;
  std::map<int, std::string> names;  // case0, case1, ... in numeric order
  for (const TensorInfo* t : reference.all()) {
    const std::string& n = t->name;
    auto dot = n.find('.');
    if (n.rfind("case", 0) != 0 || dot == std::string::npos || n.substr(dot) != ".input_ids")
      continue;
    std::string num = n.substr(4, dot - 4);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) continue;
    names[std::stoi(num)] = n.substr(0, dot);
  }
  if (names.empty())
    fail(reference.source().string() +
         ": no caseK.input_ids tensors (not a parity reference file)");
  r.pass = true;
  for (auto& [_, name] : names) {
    r.cases.push_back(run_case(model, reference, name, tolerance, kv));
    r.pass = r.pass && r.cases.back().pass;
  }
  return r;
}

}  // namespace fak
