// Checking aid of tests/reference/fidelity.py: the logits of every position of a token sequence
// as the server computes a prompt: the weights in the server's layout (or, LAYOUT file, as in
// the GGUF), the tokens in prefill chunks (one forward step each, every row's logits kept), the
// kernels of one ISA.
//   prompt_logits MODEL.gguf OUT.f32 ISA LAYOUT CHUNK TOKEN...
// ISA: scalar, avx2 or avx512vnni; LAYOUT: server or file. OUT.f32: one row of n_vocab floats
// per token.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"

namespace tokenmill {
namespace {

constexpr int kBlockSize = 16;

Status Run(const Model& model, CpuIsa isa, size_t chunk, const std::vector<int32_t>& tokens,
           const std::string& path) {
  const ModelConfig& c = model.config();
  const int64_t blocks = static_cast<int64_t>(tokens.size()) / kBlockSize + 2;
  KvCacheStorage storage(c, KvType::kF16, blocks, kBlockSize);
  BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
  ThreadPool pool(2);
  ForwardPass forward(model, CpuContext{&KernelTable(isa), &pool});
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
  if (argc < 7 || (std::string(argv[4]) != "server" && std::string(argv[4]) != "file")) {
    std::cerr << "usage: prompt_logits MODEL.gguf OUT.f32 ISA server|file CHUNK TOKEN...\n";
    return 2;
  }
  const auto isa = ParseIsa(argv[3]);
  if (!isa || !CpuSupports(*isa)) {
    std::cerr << "this CPU does not run ISA " << argv[3] << "\n";
    return 2;
  }
  ModelOptions options;
  if (std::string(argv[4]) == "file") options.layout = CpuWeightLayout::kAsInFile;
  auto model = Model::Load(argv[1], options);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  std::vector<int32_t> tokens;
  for (int i = 6; i < argc; ++i) tokens.push_back(std::atoi(argv[i]));
  const Status s = Run(**model, *isa, static_cast<size_t>(std::max(1, std::atoi(argv[5]))),
                       tokens, argv[2]);
  if (!s.ok()) {
    std::cerr << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
