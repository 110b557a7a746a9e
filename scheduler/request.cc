#include "scheduler/request.h"

#include <utility>

namespace tokenmill {

Request::Request(NewRequest spec, uint64_t order)
    : id(spec.id),
      sampling(std::move(spec.sampling)),
      priority(spec.priority),
      arrival_order(order),
      arrival_time(spec.arrival_time),
      tenant(std::move(spec.tenant)),
      cache_salt(std::move(spec.cache_salt)),
      kv_window(spec.kv_window),
      predicted_token_ids(std::move(spec.predicted_token_ids)),
      prompt_use(spec.prompt_use),
      lora(spec.lora),
      token_ids(std::move(spec.prompt_token_ids)),
      num_prompt_tokens(static_cast<int>(token_ids.size())) {}

std::string_view RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kWaiting: return "waiting";
    case RequestState::kRunning: return "running";
    case RequestState::kPreempted: return "preempted";
    case RequestState::kFinishedStopped: return "stopped";
    case RequestState::kFinishedLength: return "length";
    case RequestState::kFinishedAborted: return "aborted";
  }
  return "unknown";
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "unknown";
}

RequestState FinishedState(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return RequestState::kFinishedStopped;
    case FinishReason::kLength: return RequestState::kFinishedLength;
    case FinishReason::kAbort: return RequestState::kFinishedAborted;
  }
  return RequestState::kFinishedAborted;
}

bool IsFinished(RequestState state) {
  return state == RequestState::kFinishedStopped || state == RequestState::kFinishedLength ||
         state == RequestState::kFinishedAborted;
}

}  // namespace tokenmill
