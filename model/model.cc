#include "model/model.h"

#include <algorithm>

#include "kernels/cpu/row_groups.h"
#include "model/arch/family.h"

namespace tokenmill {
namespace {

// w in the layout the CPU's kernels read fastest, copied into a new buffer of `copies`; w
// itself when it cannot be regrouped (not a type with row groups, or rows not a multiple of 16)
// or this CPU's kernels would not run its row groups faster. The copy is made a slice of rows
// at a time, and each slice's pages of the file leave the resident set once copied, so that
// neither the loaded model nor the peak while loading holds a matrix twice.
WeightMatrix ForCpu(const GgufFile& file, const WeightMatrix& w,
                    std::vector<Model::RegroupedCopy>& copies) {
  if (!CanRegroupRows(w) || !RowGroupsPay(w.type, BestCpuIsa())) return w;
  const int64_t bytes = RegroupedBytes(w);
  // Not value-initialized: a page of the copy becomes resident when its slice is written.
  copies.push_back({std::unique_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(bytes)]), bytes});
  uint8_t* out = copies.back().bytes.get();
  constexpr int64_t kSliceBytes = int64_t{8} << 20;
  const int64_t slice_rows = std::max<int64_t>(
      kRowGroup, kSliceBytes / std::max<int64_t>(w.row_bytes, 1) / kRowGroup * kRowGroup);
  for (int64_t row = 0; row < w.rows; row += slice_rows) {
    WeightMatrix slice = w;
    slice.data = w.data + row * w.row_bytes;
    slice.rows = std::min(slice_rows, w.rows - row);
    RegroupRowsInto(slice, out + row / kRowGroup * (bytes / (w.rows / kRowGroup)));
    file.ReleasePages(slice.data, static_cast<size_t>(slice.rows * slice.row_bytes));
  }
  WeightMatrix regrouped = w;
  regrouped.data = out;
  regrouped.layout = WeightLayout::kRowGroups16;
  return regrouped;
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
      *w = ForCpu(model->file_, *w, model->regrouped_);
    }
    // Each expert on its own: a copy of every expert (the layout is per 16 rows, and an
    // expert's rows are a matrix of their own).
    for (std::vector<WeightMatrix>* experts : {&m.gate, &m.up, &m.down}) {
      for (WeightMatrix& w : *experts) w = ForCpu(model->file_, w, model->regrouped_);
    }
  }
  // token_embd stays as in the file (the embedding lookup reads its rows); a tied output gets
  // a regrouped copy of its own: with many tokens it is ~15% of a step.
  cpu.output = ForCpu(model->file_, cpu.output, model->regrouped_);
  return model;
}

int64_t Model::cpu_copy_bytes() const {
  int64_t bytes = 0;
  for (const RegroupedCopy& copy : regrouped_) bytes += copy.size;
  return bytes;
}

}  // namespace tokenmill
