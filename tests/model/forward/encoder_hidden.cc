// Test tool of tests/model/forward/test_tiny_encoder.py: an encoder's (bert's) hidden states
// of two token sequences computed together in one step, for every ISA this CPU runs, each
// token's row of n_embd (its attention sees its own sequence only, both ways).
//   encoder_hidden MODEL.gguf TOKENS_A TOKENS_B OUT_DIR
// TOKENS: comma-separated ids. Writes OUT_DIR/<isa>.f32: A's rows, then B's.
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"

namespace tokenmill {
namespace {

constexpr int kBlockSize = 16;

std::vector<int32_t> Ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream list(text);
  for (std::string id; std::getline(list, id, ',');) ids.push_back(std::stoi(id));
  return ids;
}

Status Run(const Model& model, const CpuContext& ctx, const std::vector<int32_t>& a,
           const std::vector<int32_t>& b, const std::string& path) {
  const ModelConfig& c = model.config();
  const int64_t blocks = static_cast<int64_t>(a.size() + b.size()) / kBlockSize + 3;
  KvCacheStorage storage(c, KvType::kF32, blocks, kBlockSize);
  BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
  ForwardPass forward(model, ctx);
  for (const std::vector<int32_t>* tokens : {&a, &b}) {
    TM_RETURN_IF_ERROR(builder.Append(builder.AddSequence(), *tokens, BatchBuilder::Logits::kNone));
  }
  std::vector<int32_t> rows(a.size() + b.size());
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> hidden(rows.size() * static_cast<size_t>(c.n_embd));
  TM_RETURN_IF_ERROR(forward.Run({.token_ids = builder.token_ids(),
                                  .batch = builder.batch(),
                                  .logit_rows = {},
                                  .hidden_rows = rows,
                                  .hidden_out = hidden},
                                 storage.view(), {}));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(hidden.data()),
            static_cast<std::streamsize>(hidden.size() * sizeof(float)));
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc != 5) {
    std::cerr << "usage: encoder_hidden MODEL.gguf TOKENS_A TOKENS_B OUT_DIR\n";
    return 2;
  }
  auto model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    const Status st = Run(**model, CpuContext{&KernelTable(isa), &pool}, Ids(argv[2]),
                          Ids(argv[3]), std::string(argv[4]) + "/" + std::string(IsaName(isa)) +
                                            ".f32");
    if (!st.ok()) {
      std::cerr << st.ToString() << "\n";
      return 1;
    }
  }
  return 0;
}
