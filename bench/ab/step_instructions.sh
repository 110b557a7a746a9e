#!/usr/bin/env bash
# Instructions one engine decode step executes, for two builds: a measure of a step's host work
# that the machine's noise cannot move (callgrind counts instructions; this VM exposes no
# hardware counters to perf). Each build runs tokenmill_throughput twice, one stream, one
# thread, generating SHORT then LONG tokens; the difference over (LONG - SHORT) steps leaves
# out loading, warm-up and the prompt.
#   bench/ab/step_instructions.sh A_BIN_DIR B_BIN_DIR MODEL [SHORT LONG]
set -euo pipefail
A=$1 B=$2 MODEL=$3 SHORT=${4:-32} LONG=${5:-160}
count() {  # bin_dir max_tokens -> instructions of the whole run
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1/tokenmill_throughput" \
    --model "$MODEL" --concurrency 1 --repeats 1 --threads 1 --max-tokens "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_step() { echo $(( ($(count "$1" "$LONG") - $(count "$1" "$SHORT")) / (LONG - SHORT) )); }
a=$(per_step "$A"); b=$(per_step "$B")
echo "instructions per decode step: A $a, B $b, B/A $(python3 -c "print(f'{$b/$a:.4f}')")"
