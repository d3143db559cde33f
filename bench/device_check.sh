#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (fak's issue 19): build with the CUDA backend on
# all cores, run every test (the *_cuda parity and reuse instances run there instead of skipping),
# then the HF parity fixtures and benchmarks on the device, everything into $OUT as JSON/text.
# Sized to finish in ~8 minutes on an H200 box (16 cores). Usage (device tool, repo root):
#   OUT=/some/dir bash bench/device_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/fak-device-out}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
log() { echo "== $*" | tee -a "$OUT/steps.txt"; }

log "machine"
{ nvidia-smi; nvcc --version; nproc; free -g; } > "$OUT/machine.txt" 2>&1

log "build (FAK_CUDA=ON, sm_90)"
start=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFAK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFAK_BUILD_TESTS=ON > "$OUT/configure.txt" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" > "$OUT/build.txt" 2>&1
echo "build rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.txt"
[ -x build-gpu/fak ] || { tail -50 "$OUT/build.txt"; exit 1; }

log "device tests (gtest: every *_cuda instance, the device and seam tests)"
timeout 240 build-gpu/fak_tests --gtest_filter='*cuda*:*Device*:*KvStorageSeam*:Devices/Hybrid.*' \
  --gtest_output=json:"$OUT/gtest_cuda.json" > "$OUT/gtest_cuda.txt" 2>&1
echo "gtest rc=$?" | tee -a "$OUT/steps.txt"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/gtest_cuda.txt" | tail -60

log "HF parity per fixture on cuda:0"
for f in llama-tiny qwen2-tiny qwen3-tiny qwen35-hybrid-tiny qwen3-moe-tiny qwen35-moe-tiny; do
  timeout 60 build-gpu/fak parity --device cuda -m "tests/data/oracle/$f" \
    --reference "tests/data/oracle/$f/reference.safetensors" --json > "$OUT/parity_$f.json" 2>&1
  echo "parity $f rc=$?" | tee -a "$OUT/steps.txt"
done

log "bench: bundled model, cpu vs cuda"
for dev in cpu cuda; do
  timeout 60 build-gpu/fak bench --device $dev -p 64,512 -n 32 -r 3 -o json \
    > "$OUT/bench_pycoder_$dev.json" 2>&1
done

log "bench: Qwen2.5-7B shape (8 of 28 layers, random bf16 weights), batch 1"
timeout 120 build-gpu/fak synth --config tests/data/configs/qwen2.5-7b-instruct.json \
  -o /tmp/q7b-8l --dtype bf16 --layers 8 > "$OUT/synth.txt" 2>&1
timeout 120 build-gpu/fak bench --device cuda -m /tmp/q7b-8l -p 512 -n 64 -r 3 -o json \
  > "$OUT/bench_q7b8l_bf16_cuda.json" 2>&1
echo "bench bf16 rc=$?" | tee -a "$OUT/steps.txt"
timeout 120 build-gpu/fak bench --device cuda -m /tmp/q7b-8l --quant q8_0 -p 512 -n 64 -r 3 \
  -o json > "$OUT/bench_q7b8l_q8_0_cuda.json" 2>&1
echo "bench q8_0 rc=$?" | tee -a "$OUT/steps.txt"
grep -h '"test"\|"tok_s"\|"gb_s"' "$OUT"/bench_*.json | paste - - - | head -30
log "done"
