// Measures the CPU's peak int8 dot-product throughput with N threads, for each instruction
// kind this CPU has: AVX2 (vpmaddubsw + vpmaddwd + vpaddd, 32 multiply-adds in 3 instructions:
// what the AVX2 kernels use), AVX-512 VNNI (vpdpbusd on 512 bits, 64 in one) and AMX
// (tdpbusd, 16x16x64 on tiles), from registers, so memory plays no part. This is the ceiling
// that compute-bound work (prefill, decode of many streams: ~1 multiply-add per weight per
// token) can approach, as tokenmill_memory_bandwidth is single-stream decode's;
// docs/benchmarks.md gives results as a fraction of it. Prints one JSON line a kind:
// {"kind": K, "threads": N, "gmacs_per_s": X}: billions of int8 multiply-adds a second
// (operations are twice that).
//   tokenmill_int8_peak [threads]   (default 2)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cpuid.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace {

constexpr int64_t kIterations = 1 << 22;

// Each kernel runs kIterations rounds of independent accumulator chains (more chains than
// the instruction's latency times its issue rate, so the units never wait) and returns the
// multiply-adds it did; `sink` (16 int32) keeps the result live.
__attribute__((target("avx2"))) int64_t Avx2(int32_t* sink) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  constexpr int kChains = 8;
  __m256i acc[kChains];
  for (__m256i& x : acc) x = _mm256_setzero_si256();
  for (int64_t i = 0; i < kIterations; ++i) {
    for (__m256i& x : acc) {
      __m256i input = a;
      __asm__ volatile("" : "+x"(input));  // unknown to the compiler: computed in each chain
      x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(input, b), ones));
    }
  }
  __m256i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_epi32(sum, acc[c]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sink), sum);
  return kIterations * kChains * 32;
}

__attribute__((target("avx512f,avx512vnni"))) int64_t Avx512Vnni(int32_t* sink) {
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  constexpr int kChains = 16;
  __m512i acc[kChains];
  for (__m512i& x : acc) x = _mm512_setzero_si512();
  for (int64_t i = 0; i < kIterations; ++i) {
    __asm__ volatile("" : "+v"(a), "+v"(b));  // no folding of the round into one add
    for (__m512i& x : acc) x = _mm512_dpbusd_epi32(x, a, b);
  }
  __m512i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, acc[c]);
  _mm512_storeu_si512(sink, sum);
  return kIterations * kChains * 64;
}

// AMX: tiles 0-3 accumulate 16x16 int32 each from A tiles 4-5 (16 rows of 64 bytes) and B
// tiles 6-7 (16 rows of 4x16 bytes): four tdpbusd a round, 16 * 16 * 64 multiply-adds each.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-int8"))) int64_t Amx(int32_t* sink) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) int8_t input[16 * 64];
  std::fill(std::begin(input), std::end(input), int8_t{1});
  alignas(64) int32_t output[16 * 16] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, input, 64);
  _tile_loadd(5, input, 64);
  _tile_loadd(6, input, 64);
  _tile_loadd(7, input, 64);
  const int64_t rounds = kIterations / 16;
  for (int64_t i = 0; i < rounds; ++i) {
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  _tile_stored(0, output, 64);
  _tile_release();
  *sink = output[0];
  return rounds * 4 * 16 * 16 * 64;
}

// AMX needs the kernel's leave to use the tile data state (Linux 5.16+), once a process.
bool AmxUsable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return tile && int8 && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The best of five runs: N threads each running `kernel`, in billions of multiply-adds a second.
double Measure(int64_t (*kernel)(int32_t*), int threads) {
  double best = 0.0;
  std::vector<int32_t> sinks(static_cast<size_t>(threads) * 16);
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<int64_t> macs(static_cast<size_t>(threads));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { macs[t] = kernel(&sinks[static_cast<size_t>(t) * 16]); });
    }
    for (std::thread& thread : pool) thread.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t total = 0;
    for (int64_t m : macs) total += m;
    best = std::max(best, static_cast<double>(total) / seconds / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using tokenmill::CpuIsa;
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  struct Kind {
    const char* name;
    bool usable;
    int64_t (*kernel)(int32_t*);
  };
  const Kind kinds[] = {{"avx2", tokenmill::CpuSupports(CpuIsa::kAvx2), Avx2},
                        {"avx512vnni", tokenmill::CpuSupports(CpuIsa::kAvx512Vnni), Avx512Vnni},
                        {"amx-int8", AmxUsable(), Amx}};
  for (const Kind& kind : kinds) {
    if (!kind.usable) continue;
    std::printf("{\"kind\": \"%s\", \"threads\": %d, \"gmacs_per_s\": %.1f}\n", kind.name,
                threads, Measure(kind.kernel, threads));
  }
  return 0;
}
