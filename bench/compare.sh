#!/usr/bin/env bash
# Side-by-side pp/tg of fak, ik_llama.cpp and llama.cpp on the same GGUFs, interleaved pass by pass
# so all see the same machine state; prints one markdown row per model and test with the medians of
# the passes and fak's ratios (the median of each pass's ratio, and their range). ik_llama.cpp is
# its llama-bench when IK_BENCH names it, run at its recommended CPU settings (-fa 1 -rtr 1 -fmoe
# 1); ../shared/peers/build.sh builds both peers. llama.cpp is llama-bench built from source when
# LLAMA_BENCH names it (the
# comparison issue 32 asks for: `cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build
# build --target llama-bench`), else the prebuilt library of the npm package node-llama-cpp
# (bench/llamacpp; run `npm ci` there once; -b needs this one; -d needs a llama-bench that has it).
#
#   bench/compare.sh [-p 256] [-n 32] [-d 0] [-b 1] [-F] [-k TYPE] [-t 2] [-r 3] [-P passes] [-o DIR] MODEL.gguf ...
#
#   IK_BENCH=.../ik_llama.cpp/build/bin/llama-bench LLAMA_BENCH=.../llama.cpp/build/bin/llama-bench \
#     bench/compare.sh -p 512 -n 32 -t 2 -r 2 -P 2 MODEL.gguf ...
#
# -d D: both engines run the tests after D context tokens ("pp256 @ d4096"); -F: llama.cpp with
# flash attention (off by default, as llama-bench's -fa 0); -b B: the tg test decodes B sequences at
# once (fak: B clones of the depth's context; llama.cpp: B sequences of one context, each with its
# own copy of it). -k TYPE: both engines store K and V as TYPE (f16, q8_0; llama.cpp: -ctk/-ctv, and
# flash attention, which its quantised V cache needs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fak="${FAK:-$here/../build/fak}"
p=256 n=32 d=0 b=1 fa="" t=2 r=3 passes=2 out="" kv=""
while getopts "p:n:d:b:Fk:t:r:P:o:" opt; do
  case $opt in
    p) p=$OPTARG ;; n) n=$OPTARG ;; d) d=$OPTARG ;; b) b=$OPTARG ;; F) fa="--fa" ;; t) t=$OPTARG ;;
    k) kv=$OPTARG; [ "$kv" = f16 ] || fa="--fa" ;;
    r) r=$OPTARG ;;
    P) passes=$OPTARG ;; o) out=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-p N] [-n N] [-d D] [-b B] [-F] [-t T] [-r R] [-P passes] [-o DIR] MODEL.gguf ..." >&2; exit 2; }
if [ -n "${IK_BENCH:-}" ]; then
  [ -x "$IK_BENCH" ] || { echo "IK_BENCH=$IK_BENCH is not an executable" >&2; exit 2; }
  # Its llama-bench has no -d (only -gp, a tg after a prompt), nor -b here.
  [ "$d" = 0 ] && [ "$b" = 1 ] || { echo "-d and -b: unset IK_BENCH (ik_llama.cpp's llama-bench has neither)" >&2; exit 2; }
fi
if [ -n "${LLAMA_BENCH:-}" ]; then
  [ -x "$LLAMA_BENCH" ] || { echo "LLAMA_BENCH=$LLAMA_BENCH is not an executable" >&2; exit 2; }
  [ "$b" = 1 ] || { echo "-b needs node-llama-cpp (unset LLAMA_BENCH)" >&2; exit 2; }
else
  [ -d "$here/llamacpp/node_modules/node-llama-cpp" ] || { echo "run: (cd $here/llamacpp && npm ci)" >&2; exit 2; }
fi
# llama-bench's JSON (one record per test) as bench.mjs's: {tests: [{test, tok_s}], peak_rss_mib,
# load_s}. Its peak RSS comes from GNU time; it reports no load time (0).
llama_source() {  # MODEL OUT [BENCH EXTRA...]: llama-bench of LLAMA_BENCH, or BENCH with EXTRA flags
  local bench="${3:-$LLAMA_BENCH}" extra=(-fa "$([ -n "$fa" ] && echo 1 || echo 0)")
  [ $# -gt 3 ] && extra=("${@:4}")
  local depth=(); [ "$d" = 0 ] || depth=(-d "$d")
  /usr/bin/time -f "%M" -o "$2.rss" "$bench" -m "$1" -p "$p" -n "$n" "${depth[@]}" -t "$t" -r "$r" \
    "${extra[@]}" ${kv:+-ctk "$kv" -ctv "$kv"} -o json >"$2.raw"
  python3 - "$2.raw" "$2.rss" >"$2" <<'PY'
import json, sys
recs = json.load(open(sys.argv[1]))
def name(x):
    base = ("pp%d" % x["n_prompt"]) if x["n_prompt"] else ("tg%d" % x["n_gen"])
    return base + (" @ d%d" % x["n_depth"] if x.get("n_depth") else "")
tests = [{"test": name(x), "tok_s": x["avg_ts"]} for x in recs]
print(json.dumps({"tests": tests, "peak_rss_mib": int(open(sys.argv[2]).read().split()[-1]) / 1024,
                  "load_s": 0, "build": recs[0].get("build_commit", "")}))
PY
}
work="${out:-$(mktemp -d)}"
mkdir -p "$work"
for m in "$@"; do
  name="$(basename "$m" .gguf)"
  for pass in $(seq 1 "$passes"); do
    # The file into the page cache before each engine, so neither pays the other's cold read.
    cat "$m" >/dev/null
    "$fak" bench -m "$m" -p "$p" -n "$n" -d "$d" -b "$b" -t "$t" -r "$r" ${kv:+--kv-type "$kv"} -o json \
      >"$work/$name.fak.$pass.json"
    if [ -n "${IK_BENCH:-}" ]; then
      cat "$m" >/dev/null
      llama_source "$m" "$work/$name.ik.$pass.json" "$IK_BENCH" -fa 1 -rtr 1 -fmoe 1
    fi
    cat "$m" >/dev/null
    if [ -n "${LLAMA_BENCH:-}" ]; then
      llama_source "$m" "$work/$name.llama.$pass.json"
    else
      node "$here/llamacpp/bench.mjs" -m "$m" -p "$p" -n "$n" -d "$d" -b "$b" $fa -t "$t" -r "$r" >"$work/$name.llama.$pass.json"
    fi
  done
done
python3 - "$work" "$passes" "${IK_BENCH:+ik}" "$@" <<'EOF'
import json, statistics, sys, os
work, passes, with_ik, models = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "ik", sys.argv[4:]
def tests(path, key):
    d = json.load(open(path))
    return {x["test"]: x["tok_s"] for x in d[key]}, d
# The host's memory bandwidth can move by half within minutes (a shared VM), so the ratio is the
# median of each pass's ratio (fak and llama.cpp run back to back within a pass), with their range;
# the tok/s columns are the medians over the passes.
# fak's tg rows also carry its roof: the share of the read bandwidth probed just before each
# repetition (fak bench), median over the passes, with the probes' median.
def roof(d, test):
    r = next((x for x in d["results"] if x["test"] == test), {})
    return r.get("roofline_fraction"), r.get("membw_gb_s")
def ratio(f, o, test):
    r = sorted(x[0][test] / y[0][test] for x, y in zip(f, o))
    return statistics.median(r), (f"{r[0]:.2f}-{r[-1]:.2f}" if len(r) > 1 else "-")
ikcols = "ik_llama.cpp tok/s | fak / ik (median, range) | " if with_ik else ""
print(f"| model | test | fak tok/s | {ikcols}llama.cpp tok/s | fak / llama.cpp (median of passes) | passes' ratios | fak roof (probe GB/s) | fak RSS MiB | llama.cpp RSS MiB | load s fak / llama.cpp |")
print("|---|---|---|" + ("---|---|" if with_ik else "") + "---|---|---|---|---|---|---|")
for m in models:
    name = os.path.basename(m).removesuffix(".gguf")
    f = [tests(f"{work}/{name}.fak.{i}.json", "results") for i in range(1, passes + 1)]
    l = [tests(f"{work}/{name}.llama.{i}.json", "tests") for i in range(1, passes + 1)]
    k = [tests(f"{work}/{name}.ik.{i}.json", "tests") for i in range(1, passes + 1)] if with_ik else []
    for test in f[0][0]:
        fv = statistics.median(x[0][test] for x in f)
        lv = statistics.median(x[0][test] for x in l)
        frss = max(x[1]["peak_rss_mib"] for x in f)
        lrss = max(x[1]["peak_rss_mib"] for x in l)
        fload = statistics.median(x[1]["load_seconds"] for x in f)
        lload = statistics.median(x[1]["load_s"] for x in l)
        ratios = sorted(x[0][test] / y[0][test] for x, y in zip(f, l))
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}" if len(ratios) > 1 else "-"
        roofs = [roof(x[1], test) for x in f]
        roofs = [r for r in roofs if r[0] is not None]
        rooftxt = (f"{100 * statistics.median(r[0] for r in roofs):.0f}% "
                   f"({statistics.median(r[1] for r in roofs):.1f})" if roofs else "")
        ikt = ""
        if with_ik:
            kr, ks = ratio(f, k, test)
            ikt = f"{statistics.median(x[0][test] for x in k):.1f} | **{kr:.2f}** ({ks}) | "
        print(f"| {name} | {test} | {fv:.1f} | {ikt}{lv:.1f} | {statistics.median(ratios):.2f} | "
              f"{spread} | {rooftxt} | {frss:.0f} | {lrss:.0f} | {fload:.2f} / {lload:.2f} |")
EOF
echo "raw JSON: $work" >&2
