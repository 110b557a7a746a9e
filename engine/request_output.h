// One request's side of the output stream: turns the scheduler's token events into
// GenerateOutputs (text deltas through the incremental decoder and the stop-string
// hold-back, then the output parser when the request has one; usage, timings) and hands
// them to the request's sink. It decides where the text ends the sequence: a stop string,
// or a parsed turn that is over after its one tool call. Engine thread only.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/embedding_pooler.h"
#include "engine/generate_output.h"
#include "engine/stop_string_matcher.h"
#include "scheduler/request.h"
#include "text/chat/output_parser.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

class RequestOutput {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokenizer` must outlive this.
  // `id` and `sequence_index` are what the events carry; the text shows the control tokens
  // of `rendered_controls` (GenerateRequest::rendered_control_tokens).
  // `parsing` (GenerateRequest::output_parsing, its seed already this sequence's) parses
  // the text.
  RequestOutput(RequestId id, int sequence_index, const Tokenizer& tokenizer,
                std::vector<std::string> stop_strings, OutputSink sink, int num_prompt_tokens,
                Clock::time_point submit_time, std::vector<TokenId> rendered_controls = {},
                const std::optional<OutputParserOptions>& parsing = std::nullopt);

  int sequence_index() const { return sequence_index_; }

  // The request ran in a step (the first call sets the queue time).
  void MarkScheduled(Clock::time_point now);

  // Emits the tokens the scheduler appended this step. `finish` is the scheduler's reason
  // when it finished the request. Returns true when the event was final: the scheduler
  // finished it, or a stop string matched or the parsed turn is over (the caller must then
  // finish it in the scheduler; tokens after the match or the call are dropped). `logprobs`
  // is empty or has one entry per token.
  bool OnTokens(std::span<const TokenId> tokens, std::span<const TokenLogprobs> logprobs,
                std::optional<FinishReason> finish, int num_cached_prompt_tokens,
                Clock::time_point now);

  // Prompt logprobs computed this step; the next event carries them. Entries already
  // received (a recompute after preemption) are dropped.
  void AddPromptLogprobs(const PromptLogprobsChunk& chunk);

  // Tokens the request's kv_window evicted so far, reported in the usage of later events.
  void SetEvictedTokens(int num_evicted_tokens) { usage_.evicted_tokens = num_evicted_tokens; }

  // An embedding's: its final event (kStop) carries what `pooler` pools of the rows AddHiddenRows
  // gives it.
  void PoolEmbedding(EmbeddingPooler pooler) { pooler_ = std::move(pooler); }
  void AddHiddenRows(int first_position, std::span<const float> rows) {
    if (pooler_) pooler_->Add(first_position, rows);
  }

  // A beam search hypothesis's score, carried by the final event.
  void SetCumulativeLogprob(double value) { cumulative_logprob_ = value; }

  // Emits the final event for an abort or an error (`error` says why).
  void Finish(CompletionReason reason, Status error, Clock::time_point now);

 private:
  void Emit(GenerateOutput&& output);
  // `text` into the event: as it is, or through the parser.
  void AddText(std::string_view text, GenerateOutput& output);
  void Append(ParsedOutput&& parsed, GenerateOutput& output);
  // The final event's reason and timings; the parser's held text. A stop of parsed output
  // that called tools is kToolCalls.
  void FillFinal(GenerateOutput& output, CompletionReason reason, Clock::time_point now);

  RequestId id_;
  int sequence_index_;
  IncrementalDecoder decoder_;
  StopStringMatcher stop_matcher_;
  std::optional<OutputParser> parser_;
  std::vector<std::string> stop_strings_;
  OutputSink sink_;
  RequestUsage usage_;
  RequestTimings timings_;
  Clock::time_point submit_time_;
  std::optional<Clock::time_point> last_token_time_;
  bool scheduled_ = false;
  std::vector<TokenLogprobs> prompt_logprobs_;  // not emitted yet
  int num_prompt_logprobs_ = 0;                 // received so far
  std::optional<double> cumulative_logprob_;
  std::optional<EmbeddingPooler> pooler_;
};

}  // namespace tokenmill
