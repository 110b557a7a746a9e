// Test tool of tests/model/forward/test_tiny_families.py: the logits after every token of a
// token sequence, for every ISA this CPU runs, each token fed alone (as the llama.cpp goldens
// were made: "decode"), in prefill chunks of 7 tokens ("chunked": each chunk on the KV of the
// ones before, as after a prefix-cache hit) and in chunks of 5 batched with a second sequence
// in chunks of 3 ("batched"), every row's logits, so that the decode and multi-token paths
// meet the golden and each other (docs/design.md, Determinism).
//   tiny_family_logits MODEL.gguf TOKENS OUT_DIR [CONTEXT]
// TOKENS: comma-separated ids; CONTEXT: the context it is served with (ModelOptions::context). Writes OUT_DIR/<isa>-<decode|chunked|batched>.f32: one row of
// n_vocab floats per token of TOKENS.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"

namespace tokenmill {
namespace {

constexpr int kBlockSize = 16;

// Runs `tokens` in chunks of `chunk`, with `companion` (when not empty) in chunks of
// `companion_chunk` in the same steps, and writes the logits of every token of `tokens`.
Status Run(const Model& model, const CpuContext& ctx, const std::vector<int32_t>& tokens,
           size_t chunk, const std::vector<int32_t>& companion, size_t companion_chunk,
           const std::string& path) {
  const ModelConfig& c = model.config();
  const int64_t blocks =
      static_cast<int64_t>(tokens.size() + companion.size()) / kBlockSize + 2;
  KvCacheStorage storage(c, KvType::kF16, blocks, kBlockSize);
  BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
  ForwardPass forward(model, ctx);
  const int seq = builder.AddSequence();
  const int other = builder.AddSequence();
  std::ofstream out(path, std::ios::binary);
  std::vector<float> logits;
  size_t other_done = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t n = std::min(chunk, tokens.size() - begin);
    TM_RETURN_IF_ERROR(builder.Append(seq, std::span(tokens.data() + begin, n),
                                      BatchBuilder::Logits::kAll));
    const size_t m = std::min(companion_chunk, companion.size() - other_done);
    if (m > 0) {
      TM_RETURN_IF_ERROR(builder.Append(other, std::span(companion.data() + other_done, m),
                                        BatchBuilder::Logits::kAll));
      other_done += m;
    }
    logits.assign((n + m) * static_cast<size_t>(c.n_vocab), 0.0f);
    TM_RETURN_IF_ERROR(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                   storage.view(), logits));
    builder.Clear();
    // `seq` was appended first: its rows come first.
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(n * c.n_vocab * sizeof(float)));
  }
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: tiny_family_logits MODEL.gguf TOKENS OUT_DIR [CONTEXT]\n";
    return 2;
  }
  auto model = Model::Load(argv[1], {.context = argc == 5 ? std::stoi(argv[4]) : 0});
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  std::vector<int32_t> tokens;
  std::stringstream list(argv[2]);
  for (std::string id; std::getline(list, id, ',');) tokens.push_back(std::stoi(id));
  const std::vector<int32_t> reversed(tokens.rbegin(), tokens.rend());
  struct Mode {
    const char* name;
    size_t chunk;
    std::vector<int32_t> companion;
    size_t companion_chunk;
  };
  const Mode modes[] = {{"decode", 1, {}, 0}, {"chunked", 7, {}, 0}, {"batched", 5, reversed, 3}};
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    for (const Mode& mode : modes) {
      const std::string path = std::string(argv[3]) + "/" + std::string(IsaName(isa)) + "-" +
                               mode.name + ".f32";
      const Status st = Run(**model, CpuContext{&KernelTable(isa), &pool}, tokens, mode.chunk,
                            mode.companion, mode.companion_chunk, path);
      if (!st.ok()) {
        std::cerr << st.ToString() << "\n";
        return 1;
      }
    }
  }
  return 0;
}
