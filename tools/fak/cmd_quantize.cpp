// fak quantize: GGUF in, GGUF of another type out (llama-quantize's per-tensor rules).
#include <chrono>
#include <cstdio>

#include "common.h"
#include "core/error.h"
#include "models/gguf_export.h"

namespace fak::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string in, out, type;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("quantize", "re-quantise a GGUF file: fak quantize IN OUT TYPE");
  c->add_option("input", a->in, "input .gguf")->required();
  c->add_option("output", a->out, "output .gguf")->required();
  c->add_option("type", a->type,
                "f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k, "
                "iq4_nl, iq4_xs, mxfp4_moe")
      ->required();
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->callback([a] {
    set_threads(a->threads);
    const FileType ft = parse_file_type(a->type);
    if (std::filesystem::absolute(a->in) == std::filesystem::absolute(a->out))
      fail("fak quantize: the output must differ from the input (" + a->in + ")");
    const auto t0 = std::chrono::steady_clock::now();
    ExportStats s = requantize_gguf(a->in, a->out, ft);
    std::printf("wrote %s: %s in %.1f s\n", a->out.c_str(), s.summary().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace fak::cli
