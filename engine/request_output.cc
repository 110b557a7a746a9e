#include "engine/request_output.h"

#include "common/check.h"

namespace tokenmill {
namespace {

double Seconds(RequestOutput::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

CompletionReason FromFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return CompletionReason::kStop;
    case FinishReason::kLength: return CompletionReason::kLength;
    case FinishReason::kAbort: return CompletionReason::kAbort;
  }
  return CompletionReason::kError;
}

}  // namespace

RequestOutput::RequestOutput(RequestId id, int sequence_index, const Tokenizer& tokenizer,
                             std::vector<std::string> stop_strings, OutputSink sink,
                             int num_prompt_tokens, Clock::time_point submit_time,
                             std::vector<TokenId> rendered_controls,
                             const std::optional<OutputParserOptions>& parsing)
    : id_(id),
      sequence_index_(sequence_index),
      // The stream continues a prompt: keep a leading space.
      decoder_(tokenizer, DecodeOptions{.render_special = false, .strip_space_prefix = false},
               std::move(rendered_controls)),
      stop_matcher_(stop_strings),
      stop_strings_(std::move(stop_strings)),
      sink_(std::move(sink)),
      submit_time_(submit_time) {
  usage_.prompt_tokens = num_prompt_tokens;
  if (parsing) parser_.emplace(*parsing);
}

void RequestOutput::MarkScheduled(Clock::time_point now) {
  if (scheduled_) return;
  scheduled_ = true;
  timings_.queue_seconds = Seconds(now - submit_time_);
}

bool RequestOutput::OnTokens(std::span<const TokenId> tokens,
                             std::span<const TokenLogprobs> logprobs,
                             std::optional<FinishReason> finish, int num_cached_prompt_tokens,
                             Clock::time_point now) {
  TM_CHECK(logprobs.empty() || logprobs.size() >= tokens.size());
  usage_.cached_prompt_tokens = num_cached_prompt_tokens;
  GenerateOutput out;
  std::optional<size_t> matched;
  bool turn_over = false;
  for (const TokenId token : tokens) {
    const Clock::time_point previous = last_token_time_.value_or(submit_time_);
    if (!last_token_time_) timings_.time_to_first_token = Seconds(now - submit_time_);
    timings_.token_seconds.push_back(Seconds(now - previous));
    last_token_time_ = now;
    if (!logprobs.empty()) out.logprobs.push_back(logprobs[out.token_ids.size()]);
    out.token_ids.push_back(token);
    ++usage_.completion_tokens;
    StopStringMatcher::Result text = stop_matcher_.Add(decoder_.Add(token));
    AddText(text.text, out);
    if (text.matched) {
      matched = text.matched;
      break;
    }
    // Its one call is complete: nothing after it is wanted.
    if (parser_ && parser_->turn_over()) {
      turn_over = true;
      break;
    }
  }
  if (!matched && !turn_over && finish) {
    // The end of the stream: an unfinished character, then what the matcher held back.
    StopStringMatcher::Result text = stop_matcher_.Add(decoder_.Finish());
    AddText(text.text, out);
    matched = text.matched;
    if (!matched) AddText(stop_matcher_.Flush(), out);
  }
  if (matched) {
    out.stop_string = stop_strings_[*matched];
    FillFinal(out, CompletionReason::kStop, now);
  } else if (turn_over) {
    FillFinal(out, CompletionReason::kToolCalls, now);
  } else if (finish) {
    FillFinal(out, FromFinishReason(*finish), now);
  }
  out.usage = usage_;
  const bool final_event = out.finished;
  Emit(std::move(out));
  return final_event;
}

void RequestOutput::AddPromptLogprobs(const PromptLogprobsChunk& chunk) {
  for (size_t i = 0; i < chunk.entries.size(); ++i) {
    if (chunk.first_token + static_cast<int>(i) != num_prompt_logprobs_) continue;
    prompt_logprobs_.push_back(chunk.entries[i]);
    ++num_prompt_logprobs_;
  }
}

void RequestOutput::Finish(CompletionReason reason, Status error, Clock::time_point now) {
  GenerateOutput out;
  out.error = std::move(error);
  FillFinal(out, reason, now);
  out.usage = usage_;
  Emit(std::move(out));
}

void RequestOutput::AddText(std::string_view text, GenerateOutput& out) {
  if (!parser_) {
    out.text += text;
    return;
  }
  if (text.empty()) return;
  Append(parser_->Feed(text), out);
}

void RequestOutput::Append(ParsedOutput&& parsed, GenerateOutput& out) {
  out.text += parsed.content;
  out.reasoning += parsed.reasoning;
  for (ToolCallDelta& delta : parsed.tool_calls) {
    // A fragment joins the call's previous fragment in this event.
    if (!out.tool_calls.empty() && out.tool_calls.back().index == delta.index &&
        delta.id.empty() && out.tool_calls.back().id.empty()) {
      out.tool_calls.back().arguments += delta.arguments;
      continue;
    }
    out.tool_calls.push_back(std::move(delta));
  }
}

void RequestOutput::FillFinal(GenerateOutput& out, CompletionReason reason,
                              Clock::time_point now) {
  if (parser_) {
    Append(parser_->Finish(), out);
    if (reason == CompletionReason::kStop && parser_->called_tools()) {
      reason = CompletionReason::kToolCalls;
    }
  }
  out.finished = true;
  out.finish_reason = reason;
  if (pooler_ && reason == CompletionReason::kStop) out.embedding = pooler_->Result();
  out.cumulative_logprob = cumulative_logprob_;
  timings_.total_seconds = Seconds(now - submit_time_);
  out.timings = timings_;
}

void RequestOutput::Emit(GenerateOutput&& output) {
  output.prompt_logprobs = std::move(prompt_logprobs_);
  prompt_logprobs_.clear();
  output.id = id_;
  output.index = sequence_index_;
  sink_(std::move(output));
}

}  // namespace tokenmill
