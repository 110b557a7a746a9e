#include "model/model.h"

#include <algorithm>

#include "kernels/cpu/row_groups.h"
#include "model/arch/family.h"

namespace tokenmill {
namespace {

// w in the layout the CPU's kernels read fastest, copied into a new buffer of `copies`; w
// itself when it cannot be regrouped (not Q4_1 or Q8_0, or rows not a multiple of 16).
WeightMatrix ForCpu(const WeightMatrix& w, std::vector<std::vector<uint8_t>>& copies) {
  if (!CanRegroupRows(w)) return w;
  // A moved vector keeps its buffer, so earlier copies stay where their views point.
  copies.emplace_back();
  return RegroupRows(w, copies.back());
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                             const ModelOptions& options) {
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  return FromFile(std::move(file), options);
}

StatusOr<std::unique_ptr<Model>> Model::FromFile(GgufFile file, const ModelOptions& options) {
  std::unique_ptr<Model> model(new Model(std::move(file)));
  TM_ASSIGN_OR_RETURN(model->family_, FindModelFamily(model->file_));
  TM_ASSIGN_OR_RETURN(model->config_, LoadModelConfig(model->file_, *model->family_));
  const int context = options.context > 0
                          ? std::min(options.context, model->config_.context_length)
                          : model->config_.context_length;
  TM_ASSIGN_OR_RETURN(model->weights_,
                      LoadWeights(model->file_, model->config_, *model->family_, context));
  ModelWeights& cpu = model->cpu_weights_;
  cpu = model->weights_;
  if (options.layout == CpuWeightLayout::kAsInFile) return model;
  for (LayerWeights& l : cpu.layers) {
    MoeWeights& m = l.moe;
    for (WeightMatrix* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &m.router,
                            &m.shared_gate, &m.shared_up, &m.shared_down}) {
      *w = ForCpu(*w, model->regrouped_);
    }
    // Each expert on its own: a copy of every expert (the layout is per 16 rows, and an
    // expert's rows are a matrix of their own).
    for (std::vector<WeightMatrix>* experts : {&m.gate, &m.up, &m.down}) {
      for (WeightMatrix& w : *experts) w = ForCpu(w, model->regrouped_);
    }
  }
  // token_embd stays as in the file (the embedding lookup reads its rows); a tied output gets
  // a regrouped copy of its own: with many tokens it is ~15% of a step.
  cpu.output = ForCpu(cpu.output, model->regrouped_);
  return model;
}

int64_t Model::cpu_copy_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<uint8_t>& copy : regrouped_) bytes += static_cast<int64_t>(copy.size());
  return bytes;
}

}  // namespace tokenmill
