// Builds an EngineCore from a model and a config: checks that they fit together, makes the
// backend, sizes the KV pool (on a GPU once the weights took their memory), then the
// scheduler, the runner and, with --spec, the speculator and its proposer.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

// `model`, `tokenizer` and `draft_model` (for config.spec.method kDraft only) must outlive
// the core. InvalidArgument when the config cannot work (the message names the setting to
// change).
StatusOr<std::unique_ptr<EngineCore>> BuildEngineCore(const Model& model,
                                                      const Tokenizer& tokenizer,
                                                      const EngineConfig& config,
                                                      const Model* draft_model = nullptr);

}  // namespace tokenmill
