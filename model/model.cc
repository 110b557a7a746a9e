#include "model/model.h"

namespace tokenmill {

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  return FromFile(std::move(file));
}

StatusOr<std::unique_ptr<Model>> Model::FromFile(GgufFile file) {
  std::unique_ptr<Model> model(new Model(std::move(file)));
  TM_ASSIGN_OR_RETURN(model->config_, LoadModelConfig(model->file_));
  TM_ASSIGN_OR_RETURN(model->weights_, LoadWeights(model->file_, model->config_));
  return model;
}

}  // namespace tokenmill
