// Test tool of tests/model/forward/test_tiny_families.py: the logits after every token of a
// token sequence, for every ISA this CPU runs, each token fed alone (as the llama.cpp goldens
// were made) and, again, in prefill chunks of 7 tokens (every row's logits), so that both the
// decode and the multi-token attention paths meet the golden.
//   tiny_family_logits MODEL.gguf TOKENS OUT_DIR
// TOKENS: comma-separated ids. Writes OUT_DIR/<isa>-<decode|chunked>.f32: one row of n_vocab
// floats per token.
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

Status Run(const Model& model, const CpuContext& ctx, const std::vector<int32_t>& tokens,
           size_t chunk, const std::string& path) {
  const ModelConfig& c = model.config();
  const int64_t blocks = static_cast<int64_t>(tokens.size()) / kBlockSize + 1;
  KvCacheStorage storage(c, KvType::kF16, blocks, kBlockSize);
  BatchBuilder builder(kBlockSize, blocks);
  ForwardPass forward(model, ctx);
  const int seq = builder.AddSequence();
  std::ofstream out(path, std::ios::binary);
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t n = std::min(chunk, tokens.size() - begin);
    TM_RETURN_IF_ERROR(builder.Append(seq, std::span(tokens.data() + begin, n),
                                      BatchBuilder::Logits::kAll));
    logits.assign(n * static_cast<size_t>(c.n_vocab), 0.0f);
    TM_RETURN_IF_ERROR(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                   storage.view(), logits));
    builder.Clear();
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
  }
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc != 4) {
    std::cerr << "usage: tiny_family_logits MODEL.gguf TOKENS OUT_DIR\n";
    return 2;
  }
  auto model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  std::vector<int32_t> tokens;
  std::stringstream list(argv[2]);
  for (std::string id; std::getline(list, id, ',');) tokens.push_back(std::stoi(id));
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    for (const auto& [mode, chunk] : {std::pair<const char*, size_t>{"decode", 1},
                                      std::pair<const char*, size_t>{"chunked", 7}}) {
      const std::string path = std::string(argv[3]) + "/" + std::string(IsaName(isa)) + "-" +
                               mode + ".f32";
      const Status st = Run(**model, CpuContext{&KernelTable(isa), &pool}, tokens, chunk, path);
      if (!st.ok()) {
        std::cerr << st.ToString() << "\n";
        return 1;
      }
    }
  }
  return 0;
}
