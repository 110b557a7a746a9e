// libFuzzer target: any bytes must parse or fail with a Status, never crash.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tokenmill::GgufFile::Parse({data, size});
  if (file.ok()) {
    // Touch what a loader would read, so the sanitizer sees every view.
    uint64_t sum = 0;
    for (const auto& [key, value] : file->metadata()) sum += key.size() + value.ToString().size();
    for (const auto& t : file->tensors()) {
      if (t.num_bytes > 0) sum += t.data[0] + t.data[t.num_bytes - 1];
    }
    volatile uint64_t sink = sum;  // keeps the reads
    (void)sink;
  }
  return 0;
}
