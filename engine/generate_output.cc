#include "engine/generate_output.h"

namespace tokenmill {

std::string_view CompletionReasonName(CompletionReason reason) {
  switch (reason) {
    case CompletionReason::kStop: return "stop";
    case CompletionReason::kLength: return "length";
    case CompletionReason::kAbort: return "abort";
    case CompletionReason::kError: return "error";
    case CompletionReason::kToolCalls: return "tool_calls";
  }
  return "unknown";
}

}  // namespace tokenmill
