// fak convert: a Hugging Face model directory -> one GGUF file llama.cpp can load.
#include <chrono>
#include <cstdio>

#include "common.h"
#include "core/error.h"
#include "models/gguf_export.h"

namespace fak::cli {

void register_convert(CLI::App& app) {
  struct Args {
    std::string model, out, type = "f16";
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("convert", "convert a Hugging Face model directory to GGUF");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("-o,--out", a->out, "output .gguf file")->required();
  c->add_option("--type", a->type,
                "f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m, q4_k_m, "
                "q5_k_m, q6_k, iq4_nl, iq4_xs, "
                "mxfp4_moe (MXFP4 experts, Q8_0 elsewhere)");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->callback([a] {
    set_threads(a->threads);
    const FileType ft = parse_file_type(a->type);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string dir = a->model.empty() ? default_model_dir() : a->model;
    if (!std::filesystem::is_directory(dir))
      fail("fak convert reads a Hugging Face directory (" + dir +
           " is not one); use fak quantize "
           "for GGUF files");
    auto model = Model::load(dir);
    if (!model->load_note().empty()) std::fprintf(stderr, "fak: %s\n", model->load_note().c_str());
    ExportStats s = export_gguf(*model, ft, a->out);
    for (const std::string& w : s.warnings)
      std::fprintf(stderr, "fak convert: warning: %s\n", w.c_str());
    std::printf("wrote %s: %s in %.1f s\n", a->out.c_str(), s.summary().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace fak::cli
