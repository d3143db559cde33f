// fak agentbench: A agents x T turns over a shared prefix of P tokens; each turn appends a tool
// result of R tokens and decodes D tokens. Three arms on the same model:
//   (a) re-prefill: every turn prefills the agent's whole context from scratch (what a stateless
//       server does); measured on `--a-turns` turns spread over the run (their contexts taken from
//       arm (b), whose tokens are the same) and the rest extrapolated from a fit of cost against
//       context length (reported as such, with the fit, in the JSON);
//   (b) warm: one KV per agent, kept across turns (each agent prefills the prefix itself);
//   (c) fak: the prefix prefilled once, cloned into every agent (blocks shared), each turn's tool
//       results of all agents prefilled in one batched forward call, and the D decode steps of all
//       agents batched together.
// In every arm a turn's last decoded token is fed with the next turn's tool result (arm (a) has
// it in the context it re-prefills), so no arm computes logits nothing reads.
// The arms run interleaved, turn by turn, so that all of them see the same state of the host.
// Reports tokens computed and wall time per arm (JSON with --json).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "common.h"
#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace fak::cli {

namespace {

struct AgentArgs {
  std::string model;
  int agents = 5, turns = 20, prefix = 2048, result = 64, decode = 32, a_turns = 2, threads = 0;
  bool json = false;
  std::string arms = "abc";
  KvFlags kv;
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Arm {
  std::string name;
  double seconds = 0;
  double decode_seconds = 0;  // of `seconds`, the time spent in decode steps
  int64_t prefilled = 0, decoded = 0;
  bool extrapolated = false;
  int measured_turns = 0;
  // Greedy tokens each agent decoded, in order: the arms must agree (reuse is exact).
  std::vector<std::vector<int32_t>> outputs;
  nlohmann::json fit;  // arm (a): the measured turns and the cost model fitted to them
};

void agentbench(const AgentArgs& a) {
  set_threads(a.threads);
  auto model = load_model(a.model);
  const ModelConfig& c = model->config();
  const int64_t final_ctx = int64_t(a.prefix) + int64_t(a.turns) * (a.result + a.decode);
  if (final_ctx > c.context_limit())
    fail("P + T*(R+D) = " + std::to_string(final_ctx) + " tokens exceeds the model's context of " +
         std::to_string(c.context_limit()));
  // The agents share the prefix's blocks (clones); each holds its own turns.
  a.kv.check_fits_memory(*model,
                         int64_t(a.prefix) + int64_t(a.agents) * a.turns * (a.result + a.decode),
                         "P + agents x T x (R + D)");
  std::mt19937 rng(7);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(size_t(n), 0);
    for (auto& t : v) t = int32_t(rng() % uint32_t(c.vocab));
    return v;
  };
  const auto prefix = random_tokens(a.prefix);
  // results[agent][turn]: the tool results, fixed so every arm sees the same workload.
  std::vector<std::vector<std::vector<int32_t>>> results(size_t(a.agents));
  for (auto& per_agent : results)
    for (int t = 0; t < a.turns; ++t) per_agent.push_back(random_tokens(a.result));
  auto cache = a.kv.make_cache(*model);
  const bool run_a = a.arms.find('a') != std::string::npos;
  const bool run_b = a.arms.find('b') != std::string::npos;
  const bool run_c = a.arms.find('c') != std::string::npos;
  auto now = [] { return std::chrono::steady_clock::now(); };

  // The arms run interleaved turn by turn ((b)'s turn t, (c)'s, then (a)'s if it measures t), so
  // every arm sees the same minutes of the host: its speed drifts by tens of percent over the
  // minutes one arm takes, and the ratios are what this benchmark reports.
  Arm warm_arm, fak_arm, re_arm;
  warm_arm.name = "b_warm_per_agent";
  fak_arm.name = "c_fak_shared_batched";
  re_arm.name = "a_reprefill";
  for (Arm* x : {&warm_arm, &fak_arm, &re_arm}) x->outputs.resize(size_t(a.agents));

  // Every arm feeds a turn's last decoded token with the next turn's tool result, as an agent
  // loop does (nothing needs the logits after it, and arm (a) re-prefills it anyway): each
  // agent's turn input is that token, if any, then the result.
  auto turn_input = [&](const std::vector<int32_t>& outputs, int ag, int t) {
    std::vector<int32_t> in;
    if (t > 0) in.push_back(outputs.back());
    const auto& r = results[size_t(ag)][size_t(t)];
    in.insert(in.end(), r.begin(), r.end());
    return in;
  };

  // (b): one session per agent, each prefilling the prefix itself at its first turn.
  std::vector<Session> warm;
  auto warm_turn = [&](int t) {
    for (int ag = 0; ag < a.agents; ++ag) {
      const auto t0 = now();
      if (t == 0) {
        warm.emplace_back(model, cache);
        warm.back().append(prefix);
        warm_arm.prefilled += a.prefix;
      }
      Session& s = warm[size_t(ag)];
      const std::vector<int32_t> in = turn_input(warm_arm.outputs[size_t(ag)], ag, t);
      s.append(in);
      warm_arm.prefilled += int64_t(in.size());
      const auto td = now();
      for (int d = 0; d < a.decode; ++d) {
        int32_t next = argmax(s.sampleable_logits());
        if (d + 1 < a.decode) s.append({&next, 1});
        warm_arm.outputs[size_t(ag)].push_back(next);
        ++warm_arm.decoded;
      }
      warm_arm.decode_seconds += since(td);
      warm_arm.seconds += since(t0);
    }
  };

  // (c): the prefix once, cloned into every agent; each turn's tool results in one forward call
  // (weights read once for all of them), then the decode steps of all agents batched.
  std::vector<Session> fak;
  std::vector<Session*> fak_ptrs;
  auto fak_turn = [&](int t) {
    const auto t0 = now();
    if (t == 0) {
      Session base(model, cache);
      base.append(prefix);
      fak_arm.prefilled += a.prefix;
      for (int ag = 0; ag < a.agents; ++ag) fak.push_back(base.clone());
      for (auto& x : fak) fak_ptrs.push_back(&x);
    }
    std::vector<std::vector<int32_t>> inputs;
    std::vector<std::span<const int32_t>> spans;
    for (int ag = 0; ag < a.agents; ++ag) {
      inputs.push_back(turn_input(fak_arm.outputs[size_t(ag)], ag, t));
      fak_arm.prefilled += int64_t(inputs.back().size());
    }
    for (const auto& in : inputs) spans.emplace_back(in);
    append_batch(fak_ptrs, spans);
    const auto td = now();
    std::vector<int32_t> next(size_t(a.agents));
    for (int d = 0; d < a.decode; ++d) {
      for (int ag = 0; ag < a.agents; ++ag) {
        next[size_t(ag)] = argmax(fak[size_t(ag)].sampleable_logits());
        fak_arm.outputs[size_t(ag)].push_back(next[size_t(ag)]);
      }
      if (d + 1 < a.decode) decode_batch(fak_ptrs, next);
      fak_arm.decoded += a.agents;
    }
    fak_arm.decode_seconds += since(td);
    fak_arm.seconds += since(t0);
  };

  // (a): which turns to measure. With arm (b)'s outputs at hand (the arms decode the same tokens),
  // any turn's context is known without running the turns before it, so the measured turns are
  // spread over the run, first and last included, and the cost is fitted against context length
  // (attention makes a long context cost more per token than a short one). Without them, the
  // first turns are measured and the rest extrapolated at their cost per prefilled token.
  const int measured = std::min(a.a_turns, a.turns);
  std::vector<int> re_turns;
  if (run_b && measured >= 2 && measured < a.turns) {
    for (int i = 0; i < measured; ++i)
      re_turns.push_back(int(std::lround(double(i) * (a.turns - 1) / (measured - 1))));
  } else {
    for (int t = 0; t < measured; ++t) re_turns.push_back(t);
  }
  auto context_of = [&](int ag, int t) {  // prefix + the results and replies of turns < t
    std::vector<int32_t> ctx = prefix;
    for (int u = 0; u < t; ++u) {
      const auto& r = results[size_t(ag)][size_t(u)];
      ctx.insert(ctx.end(), r.begin(), r.end());
      const auto& o = run_b ? warm_arm.outputs[size_t(ag)] : re_arm.outputs[size_t(ag)];
      ctx.insert(ctx.end(), o.begin() + std::ptrdiff_t(u) * a.decode,
                 o.begin() + std::ptrdiff_t(u + 1) * a.decode);
    }
    const auto& r = results[size_t(ag)][size_t(t)];
    ctx.insert(ctx.end(), r.begin(), r.end());
    return ctx;
  };
  std::vector<double> n_ctx, prefill_t, decode_t;  // per measured turn, all agents together
  bool matches_warm = true;
  auto re_turn = [&](int t) {
    double pt = 0, dt = 0;
    for (int ag = 0; ag < a.agents; ++ag) {
      std::vector<int32_t> ctx = context_of(ag, t);
      Session s(model, cache);
      const auto tp = now();
      s.append(ctx);
      pt += since(tp);
      const auto td = now();
      for (int d = 0; d < a.decode; ++d) {
        int32_t next = argmax(s.sampleable_logits());
        if (run_b)
          matches_warm =
              matches_warm &&
              next == warm_arm.outputs[size_t(ag)][size_t(t) * size_t(a.decode) + size_t(d)];
        else
          re_arm.outputs[size_t(ag)].push_back(next);
        if (d + 1 < a.decode) s.append({&next, 1});
      }
      dt += since(td);
    }
    n_ctx.push_back(double(prefix.size()) + double(t + 1) * a.result + double(t) * a.decode);
    prefill_t.push_back(pt);
    decode_t.push_back(dt);
  };

  for (int t = 0; t < a.turns; ++t) {
    if (run_b) warm_turn(t);
    if (run_c) fak_turn(t);
    if (run_a && std::find(re_turns.begin(), re_turns.end(), t) != re_turns.end()) re_turn(t);
  }

  std::vector<Arm> arms;
  if (run_a) {
    Arm& arm = re_arm;
    if (run_b) arm.outputs = matches_warm ? warm_arm.outputs : std::vector<std::vector<int32_t>>{};
    if (run_b && !matches_warm) arm.outputs.assign(size_t(a.agents), {-1});  // shows as a mismatch
    // Fit prefill(n) = alpha n + beta n^2 and decode(n) = gamma + delta n by least squares over the
    // measured turns (one point: prefill in proportion to n, decode constant).
    auto fit2 = [](const std::vector<double>& x, const std::vector<double>& y, auto f1, auto f2) {
      double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double u = f1(x[i]), v = f2(x[i]);
        s11 += u * u, s12 += u * v, s22 += v * v, s1y += u * y[i], s2y += v * y[i];
      }
      const double det = s11 * s22 - s12 * s12;
      if (x.size() < 2 || std::fabs(det) < 1e-12 * s11 * s22) return std::pair{s1y / s11, 0.0};
      return std::pair{(s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det};
    };
    const auto [alpha, beta] = fit2(
        n_ctx, prefill_t, [](double n) { return n; }, [](double n) { return n * n; });
    const auto [gamma, delta] = fit2(
        n_ctx, decode_t, [](double) { return 1.0; }, [](double n) { return n; });
    double total_prefill_s = 0, total_decode_s = 0;
    for (int t = 0; t < a.turns; ++t) {
      const double n = double(prefix.size()) + double(t + 1) * a.result + double(t) * a.decode;
      arm.prefilled += int64_t(n) * a.agents;
      total_prefill_s += alpha * n + beta * n * n;
      total_decode_s += gamma + delta * n;
    }
    arm.decoded = int64_t(a.agents) * a.turns * a.decode;
    arm.decode_seconds = total_decode_s;
    arm.seconds = total_prefill_s + total_decode_s;
    arm.extrapolated = measured < a.turns;
    arm.measured_turns = measured;
    arm.fit = {{"measured_turns", re_turns},
               {"measured_context", n_ctx},
               {"measured_prefill_seconds", prefill_t},
               {"measured_decode_seconds", decode_t},
               {"prefill_seconds_per_turn", "alpha*n + beta*n^2"},
               {"alpha", alpha},
               {"beta", beta},
               {"decode_seconds_per_turn", "gamma + delta*n"},
               {"gamma", gamma},
               {"delta", delta}};
    arms.push_back(arm);
  }
  if (run_b) {
    warm_arm.measured_turns = a.turns;
    arms.push_back(warm_arm);
  }
  if (run_c) {
    fak_arm.measured_turns = a.turns;
    arms.push_back(fak_arm);
  }

  nlohmann::json j{{"model", model->path().string()},
                   {"agents", a.agents},
                   {"turns", a.turns},
                   {"prefix", a.prefix},
                   {"result", a.result},
                   {"decode", a.decode},
                   {"schedule", "arms interleaved turn by turn"}};
  double b_s = 0, a_s = 0, c_s = 0;
  for (auto& arm : arms) {
    j["arms"].push_back({{"arm", arm.name},
                         {"seconds", arm.seconds},
                         {"decode_seconds", arm.decode_seconds},
                         {"prefill_seconds", arm.seconds - arm.decode_seconds},
                         {"tokens_prefilled", arm.prefilled},
                         {"tokens_decoded", arm.decoded},
                         {"tokens_computed", arm.prefilled + arm.decoded},
                         {"extrapolated", arm.extrapolated},
                         {"measured_turns", arm.measured_turns}});
    if (!arm.fit.is_null()) j["arms"].back()["extrapolation"] = arm.fit;
    if (arm.name[0] == 'a') a_s = arm.seconds;
    if (arm.name[0] == 'b') b_s = arm.seconds;
    if (arm.name[0] == 'c') c_s = arm.seconds;
  }
  // Every arm decodes the same greedy tokens (arm (a) for the turns it measured).
  bool identical = true;
  for (const auto& x : arms)
    for (const auto& y : arms)
      for (size_t ag = 0; ag < x.outputs.size(); ++ag) {
        const auto& ox = x.outputs[ag];
        const auto& oy = y.outputs[ag];
        const size_t n = std::min(ox.size(), oy.size());
        identical = identical && std::equal(ox.begin(), ox.begin() + std::ptrdiff_t(n), oy.begin());
      }
  j["outputs_identical"] = identical;
  if (c_s > 0 && b_s > 0) j["speedup_c_over_b"] = b_s / c_s;
  if (c_s > 0 && a_s > 0) j["speedup_c_over_a"] = a_s / c_s;
  if (a.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  std::printf("agentbench: %d agents x %d turns, prefix %d, result %d, decode %d (%s)\n", a.agents,
              a.turns, a.prefix, a.result, a.decode, model->path().string().c_str());
  for (auto& arm : arms)
    std::printf(
        "  %-22s %9.2f s (decode %7.2f s)  prefilled %9lld  decoded %7lld%s\n", arm.name.c_str(),
        arm.seconds, arm.decode_seconds, (long long)arm.prefilled, (long long)arm.decoded,
        arm.extrapolated
            ? ("  (extrapolated from " + std::to_string(arm.measured_turns) + " turns)").c_str()
            : "");
  std::printf("  decoded tokens identical across arms: %s\n", identical ? "yes" : "NO");
  if (j.contains("speedup_c_over_b"))
    std::printf("  c vs b: %.2fx\n", j["speedup_c_over_b"].get<double>());
  if (j.contains("speedup_c_over_a"))
    std::printf("  c vs a: %.2fx\n", j["speedup_c_over_a"].get<double>());
}

}  // namespace

void register_agentbench(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  CLI::App* c =
      app.add_subcommand("agentbench", "multi-agent workload: re-prefill vs warm KV vs fak reuse");
  c->add_option("-m,--model", a->model, "model (default: the bundled pycoder-6m)");
  c->add_option("-A,--agents", a->agents, "agents")->check(CLI::Range(1, 256));
  c->add_option("-T,--turns", a->turns, "turns per agent")->check(CLI::Range(1, 10000));
  c->add_option("-P,--prefix", a->prefix, "shared prefix tokens")->check(CLI::Range(1, 1 << 20));
  c->add_option("-R,--result", a->result, "tool-result tokens per turn")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("-D,--decode", a->decode, "decoded tokens per turn")->check(CLI::Range(1, 1 << 20));
  c->add_option("--a-turns", a->a_turns, "turns measured in arm (a) before extrapolating")
      ->check(CLI::Range(1, 10000));
  c->add_option("--arms", a->arms, "which arms to run (subset of abc)");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "print JSON");
  a->kv.add_to(c);
  c->callback([a] { agentbench(*a); });
}

}  // namespace fak::cli
