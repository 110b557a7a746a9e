#include "scheduler/scheduler_config.h"

#include <string>

namespace tokenmill {
namespace {

Status CheckPositive(int value, const char* flag) {
  if (value > 0) return OkStatus();
  return InvalidArgumentError(std::string(flag) + " must be positive, got " +
                              std::to_string(value));
}

}  // namespace

Status ValidateSchedulerConfig(const SchedulerConfig& config) {
  TM_RETURN_IF_ERROR(CheckPositive(config.max_num_batched_tokens, "--max-num-batched-tokens"));
  TM_RETURN_IF_ERROR(CheckPositive(config.max_num_seqs, "--max-num-seqs"));
  TM_RETURN_IF_ERROR(CheckPositive(config.max_queue, "--max-queue"));
  if (config.max_prefills_per_step < 0) {
    return InvalidArgumentError("--max-prefills-per-step must be 0 (no limit) or more, got " +
                                std::to_string(config.max_prefills_per_step));
  }
  if (config.max_model_len < 2) {
    return InvalidArgumentError("max model length must be at least 2 (one prompt token and one "
                                "generated token), got " + std::to_string(config.max_model_len));
  }
  return OkStatus();
}

}  // namespace tokenmill
