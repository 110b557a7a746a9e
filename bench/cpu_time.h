// CPU time of all this process's threads: on a machine shared with other jobs it measures the
// work done, where wall time also measures the others' load.
#pragma once

#include <time.h>

namespace tokenmill {

inline double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace tokenmill
