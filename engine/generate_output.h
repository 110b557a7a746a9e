// What an engine streams back for a request: one GenerateOutput per step that produced
// something for it, the last with finished == true.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/types.h"
#include "common/status.h"
#include "engine/sampling/token_logprobs.h"
#include "scheduler/request.h"
#include "text/chat/tool_call_parser.h"

namespace tokenmill {

enum class CompletionReason {
  kStop,    // EOS/EOT, a stop token id or a stop string
  kLength,  // max_tokens or the context length
  kAbort,   // Abort(), or Shutdown past its drain time
  kError,   // the engine could not run it; GenerateOutput::error says why
  // Parsed output (GenerateRequest::output_parsing) that ended with tool calls: at an
  // end-of-generation token, a stop, or where the turn was over after its one call.
  kToolCalls,
};
std::string_view CompletionReasonName(CompletionReason reason);

struct RequestUsage {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // of those, served by the prefix cache
  int completion_tokens = 0;     // generated tokens reported so far (a stop token included)
  int evicted_tokens = 0;        // dropped from the K/V cache by a kv_window
};

// Seconds, measured on the engine's steady clock from Submit.
struct RequestTimings {
  double queue_seconds = 0.0;          // Submit -> first scheduled
  double time_to_first_token = 0.0;    // Submit -> first token sampled
  // Gap before each generated token: [0] is time_to_first_token, then inter-token times.
  std::vector<double> token_seconds;
  double total_seconds = 0.0;          // Submit -> finished
};

struct GenerateOutput {
  RequestId id = 0;
  // Which of the request's n sequences this event belongs to (0 when n is 1).
  int index = 0;
  std::vector<TokenId> token_ids;  // generated since the previous event
  // One per token_ids entry when the request asked for logprobs, else empty.
  std::vector<TokenLogprobs> logprobs;
  // With sampling.prompt_logprobs, sequence 0 only: the next prompt tokens' entries, in
  // order, from prompt token 0 (logprob 0, no top: nothing precedes it); all of them arrive
  // before or with the first generated token.
  std::vector<TokenLogprobs> prompt_logprobs;
  // UTF-8 text since the previous event. Text that may begin a stop string, or an
  // unfinished character, is held back until it is known not to (or at the end).
  std::string text;
  // With GenerateRequest::output_parsing: `text` is the answer's content only; the reasoning
  // and the tool-call deltas (a call's first with its index, id and name, then fragments of
  // its arguments) since the previous event.
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool finished = false;
  // Set on the final event only.
  std::optional<CompletionReason> finish_reason;
  std::string stop_string;  // the stop string that matched, if that was the reason
  Status error;             // why, when finish_reason is kError
  RequestUsage usage;       // running totals of this sequence
  // Beam search, on the final event: the hypothesis's summed log-probabilities.
  std::optional<double> cumulative_logprob;
  RequestTimings timings;   // complete on the final event only
  // An embedding's (GenerateRequest::embedding) final event: the pooled vector, n_embd floats.
  std::vector<float> embedding;

  // The one event of a request refused after Submit accepted it (a full queue).
  static GenerateOutput Refused(RequestId id, Status error) {
    GenerateOutput out;
    out.id = id;
    out.finished = true;
    out.finish_reason = CompletionReason::kError;
    out.error = std::move(error);
    return out;
  }
};

// Receives a request's events, in order, on the engine thread. It must not block or call
// back into the engine's Shutdown: hand the event to a queue (OutputStream) or to a gRPC
// reactor that starts a write when none is in flight.
using OutputSink = std::function<void(GenerateOutput&&)>;

}  // namespace tokenmill
