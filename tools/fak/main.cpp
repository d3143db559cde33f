// The fak command: one binary, one file per subcommand. Errors are caught here and printed once.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common.h"
#include "core/error.h"

namespace {

// note: libgomp reads its wait policy from the environment before main runs. Its default spins
// ~300k iterations at every barrier: ideal on an idle machine, but 10-20x slower (measured here)
// when another process shares the cores, because a spinning thread burns the time slice its
// descheduled peer needs. Fully sleeping waits (PASSIVE) cost ~18% of decode speed on an idle
// machine. A short spin then sleep measured within noise of ACTIVE when idle (Qwen2.5-0.5B bf16,
// 2 threads: tg 22.5 vs 21.6 tok/s, PASSIVE 18.5) and close to PASSIVE when busy, so fak
// re-executes itself once with it unless the user chose a policy.
void bound_openmp_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  ::setenv("GOMP_SPINCOUNT", "20000", 1);
  ::execv("/proc/self/exe", argv);  // only returns on failure: carry on with the default
}

}  // namespace

int main(int argc, char** argv) {
  bound_openmp_spinning(argv);
  CLI::App app{"fak — an LLM inference engine for agents"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  fak::cli::register_run(app);
  fak::cli::register_tokenize(app);
  fak::cli::register_parity(app);
  fak::cli::register_perplexity(app);
  fak::cli::register_bench(app);
  fak::cli::register_evict_check(app);
  fak::cli::register_agentbench(app);
  fak::cli::register_specbench(app);
  fak::cli::register_convert(app);
  fak::cli::register_quantize(app);
  fak::cli::register_synth(app);
  fak::cli::register_serve(app);
  fak::cli::register_chat(app);
  fak::cli::register_pull(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fak::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fak: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fak: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    // note: what escapes fak::Error (a file system call, a parser deep in a library) is still one
    // line and a failing exit, never std::terminate's abort.
    std::fflush(stdout);
    std::fprintf(stderr, "fak: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
