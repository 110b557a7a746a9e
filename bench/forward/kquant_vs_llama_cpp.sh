#!/usr/bin/env bash
# Prefill, 16-stream and single-stream decode of a K-quant model, tokenmill against llama.cpp
# built natively from the pinned llama-cpp-python sdist's vendor/llama.cpp (llama-bench and
# llama-batched-bench, repacking off and on), interleaved in rounds with the machine's int8
# peak and bandwidth, since both swing within minutes (docs/benchmarks.md, issue 36).
#   bench/forward/kquant_vs_llama_cpp.sh LLAMA_BIN MODEL [ROUNDS] [BASE_FORWARD_BENCH]
# BASE_FORWARD_BENCH: another build's tokenmill_forward_bench, run beside this one's.
set -euo pipefail
L=$1 M=$2 rounds=${3:-3} base=${4:-}
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$here/build/bin
prefill() {  # tokenmill: 512-token prefill, then 32 steps of 16 sequences of 128 tokens
  "$1" --model "$M" --prompt-tokens 512 --chunk 512 --batch 16 --context 128 --decode-steps 32 \
    --pairs 1 2>&1 | grep "pair 0 server"
}
for r in $(seq "$rounds"); do
  echo "## round $r $(date -u +%H:%M:%S)"
  "$L/llama-bench" -m "$M" -p 512 -n 0 -t 2 -b 512 -ub 512 -r 2 --repack 0 2>&1 | grep pp512 |
    awk -F'|' '{print "llama.cpp pp512, no repack:", $(NF-1)}'
  echo "tokenmill: $(prefill "$bin/tokenmill_forward_bench")"
  if [ -n "$base" ]; then echo "base: $(prefill "$base")"; fi
  for repack in "--no-repack" ""; do
    "$L/llama-batched-bench" -m "$M" -c 4096 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 16 -t 2 \
      $repack 2>&1 | grep "^|   128" | awk -F'|' -v r="${repack:-repack}" \
      '{print "llama.cpp 16 streams S_TG (" r "):", $9}'
  done
  "$L/llama-bench" -m "$M" -p 0 -n 32 -t 2 -r 2 --repack 0 2>&1 | grep tg32 |
    awk -F'|' '{print "llama.cpp tg32, no repack:", $(NF-1)}'
  echo "tokenmill 1 stream: $("$bin/tokenmill_forward_bench" --model "$M" --prompt-tokens 16 \
    --batch 1 --context 128 --decode-steps 32 --pairs 1 2>&1 | grep "pair 0 server")"
  "$bin/tokenmill_int8_peak" 2
  "$bin/tokenmill_memory_bandwidth" 2
done
