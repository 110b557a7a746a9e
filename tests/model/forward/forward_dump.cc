// Debugging aid (not a test): runs a prompt through the forward pass one token per step, as
// tests/reference/llama_cpp_dump.py runs llama.cpp, and writes every tapped activation to
// OUT_DIR/<name>-<layer>.f32 (rows appended token after token) and the logits to
// OUT_DIR/logits.f32, for an op-by-op comparison with llama.cpp. With FORCE_DIR set in the
// environment, each activation is then replaced by FORCE_DIR/<name>-<layer>.f32's row for
// that token where the file exists (llama.cpp's values), so the next op starts from
// llama.cpp's inputs and each op's difference is its own.
//   [FORCE_DIR=DIR] forward_dump MODEL.gguf OUT_DIR TOKEN_ID...
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"

int main(int argc, char** argv) {
  using namespace tokenmill;
  if (argc < 4) {
    std::cerr << "usage: forward_dump MODEL.gguf OUT_DIR TOKEN_ID...\n";
    return 2;
  }
  auto model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  const std::string out_dir = argv[2];
  const ModelConfig& c = (*model)->config();
  ThreadPool pool(1);
  ForwardPass forward(**model, CpuContext{&KernelTable(BestCpuIsa()), &pool});
  const char* force_dir = std::getenv("FORCE_DIR");
  std::map<std::string, std::ofstream> files;
  int token_index = 0;
  forward.set_tap([&](const char* name, int layer, float* data, int64_t rows, int64_t row_size) {
    std::string file = std::string(name) + (layer >= 0 ? "-" + std::to_string(layer) : "");
    auto [it, inserted] = files.try_emplace(file);
    if (inserted) it->second.open(out_dir + "/" + file + ".f32", std::ios::binary);
    const auto bytes = static_cast<std::streamsize>(rows * row_size * sizeof(float));
    it->second.write(reinterpret_cast<const char*>(data), bytes);
    if (force_dir == nullptr) return;
    std::ifstream forced(std::string(force_dir) + "/" + file + ".f32", std::ios::binary);
    if (!forced) return;
    forced.seekg(token_index * bytes);
    forced.read(reinterpret_cast<char*>(data), bytes);
  });
  const int n = argc - 3;
  KvCacheStorage storage(c, KvType::kF16, (n + 15) / 16 + 1, 16);
  BatchBuilder builder(16, (n + 15) / 16 + 1);
  const int seq = builder.AddSequence();
  std::vector<float> logits(c.n_vocab);
  std::ofstream logits_file(out_dir + "/logits.f32", std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const int32_t token = std::atoi(argv[3 + i]);
    if (!builder.Append(seq, std::span(&token, 1), BatchBuilder::Logits::kLast).ok()) return 1;
    const Status s =
        forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()}, storage.view(),
                    logits);
    if (!s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
    builder.Clear();
    ++token_index;
    logits_file.write(reinterpret_cast<const char*>(logits.data()),
                      static_cast<std::streamsize>(logits.size() * sizeof(float)));
  }
  return 0;
}
