#!/bin/bash
# Batched decode (several agents decoding together) side by side: fak bench -b, each sequence its
# own random token and with --same-tokens, against llama-batched-bench of ik_llama.cpp (which feeds
# token 0 to every sequence at every position, so its MoE steps read one token's experts: compare
# it with fak's "same" rows) and of llama.cpp (a random token per sequence: compare it with fak's
# default rows); depth 16, 2 threads, B = 1, 4, 8, file after file, PASSES passes (default 2).
#   FAK=build/fak IK_BATCHED=.../ik_llama.cpp/build/bin/llama-batched-bench \
#   LLAMA_BATCHED=.../llama.cpp/build/bin/llama-batched-bench bench/batched_compare.sh MODEL.gguf ...
# (the peers' tool: cmake --build build --target llama-batched-bench in each peer's tree).
set -u
F=${FAK:-build/fak}
# (no apostrophes in the messages: inside ${...:?word} one opens a quoted string, which ran on to
# the next line's and left LLB unset)
IKB=${IK_BATCHED:?IK_BATCHED: the llama-batched-bench of ik_llama.cpp}
LLB=${LLAMA_BATCHED:?LLAMA_BATCHED: the llama-batched-bench of llama.cpp}
for pass in ${PASSES:-1 2}; do
  for m in "$@"; do
    echo "=== pass $pass $m fak"
    "$F" bench -m "$m" -p 0 -n 32 -d 16 -b 1,4,8 -r 2 -t 2 2>&1 | grep -E "tg32|bandwidth"
    echo "=== pass $pass $m fak-same"
    "$F" bench -m "$m" -p 0 -n 32 -d 16 -b 4,8 -r 2 -t 2 --same-tokens --no-membw 2>&1 | grep -E "tg32"
    echo "=== pass $pass $m ik"
    "$IKB" -m "$m" -npp 16 -ntg 32 -npl 1,4,8 -c 2048 -t 2 -fa on -rtr 2>&1 | grep -E "^\|"
    echo "=== pass $pass $m llama"
    "$LLB" -m "$m" -npp 16 -ntg 32 -npl 1,4,8 -c 2048 -t 2 -fa on 2>&1 | grep -E "^\|"
  done
done
