// llama.cpp's logits for every position of a prompt given as token ids (one decode call, f32 KV,
// no flash attention, one thread), then 16 greedy tokens each fed back alone: what
// make_reference.py turns into a reference file `fak parity` reads. Built against a source build
// of llama.cpp (LLAMA = its checkout, with build/bin):
//   g++ -O1 -std=c++17 dump_logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -o dump_logits
//   LD_LIBRARY_PATH=$LLAMA/build/bin ./dump_logits MODEL.gguf out.bin ID ID ...
//   python3 make_reference.py FIXTURE/reference.safetensors out.bin ref.safetensors
//   build/fak parity -m MODEL.gguf --reference ref.safetensors
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"
int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "dump MODEL OUT.bin id...\n");
    return 1;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* m = llama_model_load_from_file(argv[1], mp);
  if (!m) return 2;
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(m, cp);
  llama_batch b = llama_batch_init(int(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = int(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = int(ids.size());
  if (llama_decode(ctx, b) != 0) return 3;
  const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
  FILE* f = std::fopen(argv[2], "wb");
  for (size_t i = 0; i < ids.size(); ++i) std::fwrite(llama_get_logits_ith(ctx, int(i)), 4, nv, f);
  std::fclose(f);
  // 16 greedy tokens, each fed back alone (the cache path).
  const float* last = llama_get_logits_ith(ctx, int(ids.size()) - 1);
  FILE* g = std::fopen((std::string(argv[2]) + ".greedy").c_str(), "w");
  int pos = int(ids.size());
  for (int s = 0; s < 16; ++s) {
    int best = 0;
    for (int v = 1; v < nv; ++v)
      if (last[v] > last[best]) best = v;
    std::fprintf(g, "%d\n", best);
    llama_batch one = llama_batch_init(1, 0, 1);
    one.token[0] = best;
    one.pos[0] = pos++;
    one.n_seq_id[0] = 1;
    one.seq_id[0][0] = 0;
    one.logits[0] = 1;
    one.n_tokens = 1;
    if (llama_decode(ctx, one) != 0) return 4;
    last = llama_get_logits_ith(ctx, 0);
  }
  std::fclose(g);
  std::printf("%zu x %d\n", ids.size(), nv);
  return 0;
}
