# Sourced by scripts/test: the fuzz build at idle priority beside ctest. The e2e tests leave
# part of the two cores idle while they wait on servers and clients (ctest ran at 180% of 200%);
# a build at nice 19 takes that time and little else (cold CI run, 2026-12-06: ctest 452 -> 471
# s, the fuzz stage 539 -> 439 s). Beside the ASan tests the TSan build cost them about what it
# saved, so it runs after them. When ctest ends the build is stopped (what it finished stays
# built, and the compiler cache keeps it) and scripts/fuzz builds the rest at full priority.
IDLE_BUILD_PID=""

# log command...: the command at nice 19, in a process group of its own (set -m).
idle_build_start() {
  local log=$1
  shift
  set -m
  nice -n 19 "$@" > "$log" 2>&1 &
  IDLE_BUILD_PID=$!
  set +m
  trap idle_build_stop EXIT  # set +m put the signals back to their defaults (bash 5.2)
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

idle_build_stop() {  # interrupts the build and waits for it; a failure there is not this one's
  [ -n "$IDLE_BUILD_PID" ] || return 0
  kill -INT -- -"$IDLE_BUILD_PID" 2>/dev/null || true
  wait "$IDLE_BUILD_PID" 2>/dev/null || true
  IDLE_BUILD_PID=""
}
