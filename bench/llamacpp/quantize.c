/* llama.cpp's own quantizer (llama_model_quantize in the prebuilt libllama that node-llama-cpp
 * ships), to make GGUFs "from llama.cpp's tools" for fak to read. The package ships no headers, so
 * the two functions are declared here; only the leading fields of the parameter struct are named,
 * and it is returned into a buffer larger than the real one.
 *
 *   cc -O2 bench/llamacpp/quantize.c -o /tmp/llama-quantize -L"$LIB" -l:libllama.v0.4.0.so \
 *      -Wl,-rpath,"$LIB"        # LIB = bench/llamacpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
 *   /tmp/llama-quantize IN.gguf OUT.gguf FTYPE   # FTYPE: llama_ftype number, e.g. 7 = Q8_0, 15 = Q4_K_M
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int32_t nthread;
  int32_t ftype; /* enum llama_ftype */
  unsigned char rest[512];
} quantize_params;

extern void llama_backend_init(void);
extern quantize_params llama_model_quantize_default_params(void);
extern uint32_t llama_model_quantize(const char* in, const char* out, const quantize_params* p);

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  quantize_params p = llama_model_quantize_default_params();
  p.ftype = atoi(argv[3]);
  p.nthread = 2;
  uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  if (rc != 0) fprintf(stderr, "llama_model_quantize failed: %u\n", rc);
  return rc == 0 ? 0 : 1;
}
