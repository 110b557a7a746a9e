// Measures read bandwidth from main memory with N threads (the ceiling that decode, which
// reads every weight once per token, can approach). Prints {"threads": N, "gb_per_s": X}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const size_t bytes = size_t{1} << 30;  // far larger than any cache
  std::vector<uint64_t> data(bytes / sizeof(uint64_t));
  for (size_t i = 0; i < data.size(); ++i) data[i] = i;
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = data.size() * t / threads, end = data.size() * (t + 1) / threads;
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (size_t i = begin; i + 4 <= end; i += 4) {
          a += data[i];
          b += data[i + 1];
          c += data[i + 2];
          d += data[i + 3];
        }
        sums[t] = a + b + c + d;
      });
    }
    for (std::thread& th : pool) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / seconds / 1e9);
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  std::printf("{\"threads\": %d, \"gb_per_s\": %.2f, \"checksum\": %llu}\n", threads, best,
              static_cast<unsigned long long>(total));
  return 0;
}
