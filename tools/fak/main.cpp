// The fak command: one binary, one file per subcommand. Errors are caught here and printed once.
#include <cstdio>

#include "common.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"fak — an LLM inference engine for agents"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  fak::cli::register_run(app);
  fak::cli::register_tokenize(app);
  fak::cli::register_parity(app);
  fak::cli::register_perplexity(app);
  fak::cli::register_bench(app);
  fak::cli::register_serve(app);
  fak::cli::register_chat(app);
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
  }
  return 0;
}
