// Checking aid (not a test): the raw logits of a fixed multi-sequence scenario, for every ISA
// this CPU runs, every CPU KV type and the reference kernels, so that two revisions can be
// compared bit for bit (scripts/compare-logits builds this tool at both and runs cmp).
//   logits_dump MODEL.gguf OUT_DIR
// writes OUT_DIR/<isa or reference>-<kv type>.f32: every logit row of every step, in order.
//
// The scenario mixes what a step can hold: prefill chunks with all or only the last logits,
// a chunk on top of a cached prefix, and decode steps of three sequences fed their argmax.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/kv_type.h"
#include "model/forward.h"

namespace tokenmill {
namespace {

constexpr int kBlockSize = 16;

// Deterministic token ids in [0, n_vocab): a 64-bit LCG, so both revisions feed the same.
std::vector<int32_t> Tokens(int n, uint64_t seed, int n_vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(static_cast<int32_t>((seed >> 33) % static_cast<uint64_t>(n_vocab)));
  }
  return ids;
}

int32_t Argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

Status Dump(const Model& model, const CpuContext& ctx, KernelMode mode, KvType kv_type,
            const std::string& path) {
  const ModelConfig& c = model.config();
  const int64_t blocks = 32;
  KvCacheStorage storage(c, kv_type, blocks, kBlockSize);
  BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
  ForwardPass forward(model, ctx, mode);
  std::ofstream out(path, std::ios::binary);
  std::vector<float> logits;
  auto run = [&]() -> Status {
    logits.assign(builder.logit_rows().size() * static_cast<size_t>(c.n_vocab), 0.0f);
    TM_RETURN_IF_ERROR(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                   storage.view(), logits));
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    builder.Clear();
    return OkStatus();
  };
  using L = BatchBuilder::Logits;
  const int a = builder.AddSequence();
  const int b = builder.AddSequence();
  const int s = builder.AddSequence();
  TM_RETURN_IF_ERROR(builder.Append(a, Tokens(40, 1, c.n_vocab), L::kAll));
  TM_RETURN_IF_ERROR(builder.Append(b, Tokens(7, 2, c.n_vocab), L::kLast));
  TM_RETURN_IF_ERROR(run());
  const std::vector<int32_t> next_a = Tokens(1, 3, c.n_vocab);
  TM_RETURN_IF_ERROR(builder.Append(a, next_a, L::kLast));
  TM_RETURN_IF_ERROR(builder.Append(b, Tokens(20, 4, c.n_vocab), L::kAll));
  TM_RETURN_IF_ERROR(builder.Append(s, Tokens(33, 5, c.n_vocab), L::kLast));
  TM_RETURN_IF_ERROR(run());
  // Decode: each sequence's last logit row (of a, b and s in that order) picks its next token.
  std::vector<int64_t> last_rows = {0, 20, 21};
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> next;
    for (int64_t r : last_rows) next.push_back(Argmax(logits.data() + r * c.n_vocab, c.n_vocab));
    for (int seq : {a, b, s}) {
      TM_RETURN_IF_ERROR(builder.Append(seq, std::span(&next[seq], 1), L::kLast));
    }
    TM_RETURN_IF_ERROR(run());
    last_rows = {0, 1, 2};
  }
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc != 3) {
    std::cerr << "usage: logits_dump MODEL.gguf OUT_DIR\n";
    return 2;
  }
  auto model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  const std::string out_dir = argv[2];
  ThreadPool pool(2);
  for (KvType kv : {KvType::kF16, KvType::kF32, KvType::kInt8}) {
    const std::string kv_name(KvTypeName(kv));
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      const Status st = Dump(**model, CpuContext{&KernelTable(isa), &pool}, KernelMode::kFast, kv,
                             out_dir + "/" + std::string(IsaName(isa)) + "-" + kv_name + ".f32");
      if (!st.ok()) {
        std::cerr << st.ToString() << "\n";
        return 1;
      }
    }
    const Status st = Dump(**model, CpuContext{&KernelTable(CpuIsa::kScalar), &pool},
                           KernelMode::kReference, kv, out_dir + "/reference-" + kv_name + ".f32");
    if (!st.ok()) {
      std::cerr << st.ToString() << "\n";
      return 1;
    }
  }
  return 0;
}
