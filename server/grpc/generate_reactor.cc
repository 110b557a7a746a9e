#include "server/grpc/generate_reactor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>

#include "server/grpc/status_conversion.h"
#include "server/grpc/wire_text.h"

namespace tokenmill::server {
namespace {

v1::FinishReason ToProto(CompletionReason reason) {
  switch (reason) {
    case CompletionReason::kStop: return v1::FINISH_REASON_STOP;
    case CompletionReason::kLength: return v1::FINISH_REASON_LENGTH;
    case CompletionReason::kAbort: return v1::FINISH_REASON_ABORT;
    case CompletionReason::kToolCalls: return v1::FINISH_REASON_TOOL_CALLS;
    case CompletionReason::kError: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

GenerateReactor::GenerateReactor(RequestMetrics& metrics, StreamCounter& streams,
                                 std::string request_id)
    : metrics_(metrics),
      streams_(streams),
      request_id_(std::move(request_id)) {
  streams_.Opened();
}

void GenerateReactor::Start(ValidatedRequest request) {
  request.set_sink([this](GenerateOutput&& output) { OnOutput(std::move(output)); });
  {
    // Held by the engine (until its final event) and by this call: the engine may finish
    // the request, and gRPC end the call, before Submit returns.
    std::lock_guard lock(mutex_);
    holders_ += 2;
    num_sequences_ = request.get().n;
    max_tokens_ = request.get().sampling.max_tokens;
  }
  StatusOr<RequestId> id = engine_->Submit(std::move(request));
  if (!id.ok()) {
    // The sink will never be called: the engine's hold ends here.
    spdlog::debug("request {} refused: {}", request_id_, id.status().ToString());
    {
      std::lock_guard lock(mutex_);
      --holders_;
      finish_called_ = true;
    }
    Finish(ToGrpcStatus(id.status()));
    Release();
    return;
  }
  bool abort_now = false;
  {
    std::lock_guard lock(mutex_);
    engine_id_ = *id;
    abort_now = cancelled_ && !engine_finished_;
  }
  spdlog::debug("request {} submitted as engine request {}", request_id_, *id);
  if (abort_now) engine_->Abort(*id);
  Release();
}

void GenerateReactor::Hold() {
  std::lock_guard lock(mutex_);
  ++holders_;
}

void GenerateReactor::StartBuilt(ModelLease model, StatusOr<ValidatedRequest> built) {
  if (built.ok()) {
    {
      std::lock_guard lock(mutex_);  // OnCancel reads engine_ once engine_id_ is set
      model_ = std::move(model);
      engine_ = model_->engine.get();
    }
    Start(std::move(built).value());
  } else {
    spdlog::debug("request {} refused: {}", request_id_, built.status().ToString());
    bool finish = false;
    {
      std::lock_guard lock(mutex_);
      finish = !finish_called_;  // a cancel may have finished it meanwhile
      finish_called_ = true;
    }
    if (finish) Finish(ToGrpcStatus(built.status()));
  }
  Release();
}

namespace {

// About 360 bytes an entry with 20 top tokens: some 370 kB a response.
constexpr int kPromptLogprobsPerResponse = 1024;

}  // namespace

v1::GenerateResponse& GenerateReactor::PendingFor(int index) {
  // Merge into the last response not yet written when it is the same sequence's and not
  // its final one: responses of one sequence stay in order, sequences interleave.
  if (pending_.empty() || pending_.back().index() != static_cast<uint32_t>(index) ||
      pending_.back().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    pending_.emplace_back();
    pending_.back().set_request_id(request_id_);
    pending_.back().set_index(static_cast<uint32_t>(index));
  }
  return pending_.back();
}

void GenerateReactor::AddText(GenerateOutput& output, v1::GenerateResponse& response) {
  response.mutable_text()->append(output.text);
  response.mutable_reasoning_text()->append(output.reasoning);
  for (ToolCallDelta& delta : output.tool_calls) {
    const int n = response.tool_calls_size();
    // A fragment joins the call's previous fragment in this response.
    if (n > 0 && response.tool_calls(n - 1).index() == static_cast<uint32_t>(delta.index) &&
        delta.id.empty() && response.tool_calls(n - 1).id().empty()) {
      response.mutable_tool_calls(n - 1)->mutable_arguments()->append(delta.arguments);
      continue;
    }
    v1::ToolCallDelta* wire = response.add_tool_calls();
    wire->set_index(static_cast<uint32_t>(delta.index));
    wire->set_id(std::move(delta.id));
    wire->set_name(std::move(delta.name));
    wire->set_arguments(std::move(delta.arguments));
  }
}

void GenerateReactor::ToWire(const TokenLogprobs& logprobs, v1::TokenLogprobs& wire) const {
  // Each token's text as Detokenize gives it with render_special (a chosen <|im_end|> shows
  // as itself), so a client needs no Detokenize call per token.
  const auto set = [this](v1::TokenLogprob& out, const TokenLogprob& logprob) {
    out.set_token_id(logprob.token_id);
    out.set_logprob(logprob.logprob);
    out.set_rank(static_cast<uint32_t>(logprob.rank));
    const TokenId id = logprob.token_id;
    out.set_text(WireText(model_->tokenizer, std::span<const TokenId>(&id, 1),
                          /*render_special=*/true));
  };
  set(*wire.mutable_chosen(), logprobs.chosen);
  for (const TokenLogprob& t : logprobs.top) set(*wire.add_top(), t);
}

void GenerateReactor::AddLogprobs(const GenerateOutput& output,
                                  v1::GenerateResponse& response) const {
  for (const TokenLogprobs& l : output.logprobs) ToWire(l, *response.add_logprobs());
}

void GenerateReactor::AddPromptLogprobs(const GenerateOutput& output) {
  for (const TokenLogprobs& l : output.prompt_logprobs) {
    if (PendingFor(output.index).prompt_logprobs_size() >= kPromptLogprobsPerResponse) {
      pending_.emplace_back();
      pending_.back().set_request_id(request_id_);
      pending_.back().set_index(static_cast<uint32_t>(output.index));
    }
    v1::GenerateResponse& response = pending_.back();
    // The prompt's counts from the first response on, as OnOutput sets them.
    response.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(output.usage.prompt_tokens));
    ToWire(l, *response.add_prompt_logprobs());
  }
}

void GenerateReactor::OnOutput(GenerateOutput&& output) {
  bool all_finished = false;
  {
    std::lock_guard lock(mutex_);
    const bool error = output.finished && output.finish_reason == CompletionReason::kError;
    if (!output.token_ids.empty() || !output.text.empty() || !output.prompt_logprobs.empty() ||
        (output.finished && !error)) {
      AddPromptLogprobs(output);
      v1::GenerateResponse& response = PendingFor(output.index);
      // The prompt's counts from the first response on (Anthropic's message_start has them).
      v1::Usage* usage = response.mutable_usage();
      usage->set_prompt_tokens(static_cast<uint32_t>(output.usage.prompt_tokens));
      usage->set_cached_prompt_tokens(static_cast<uint32_t>(output.usage.cached_prompt_tokens));
      response.mutable_token_ids()->Add(output.token_ids.begin(), output.token_ids.end());
      AddText(output, response);
      AddLogprobs(output, response);
    }
    if (output.finished) {
      const CompletionReason reason = output.finish_reason.value_or(CompletionReason::kError);
      metrics_.ObserveFinished(output.timings, reason, output.usage);
      most_generated_tokens_ = std::max(most_generated_tokens_, output.usage.completion_tokens);
      spdlog::debug("request {} sequence {} finished: {}, {} prompt + {} generated tokens",
                    request_id_, output.index, CompletionReasonName(reason),
                    output.usage.prompt_tokens, output.usage.completion_tokens);
      if (error) {
        if (!error_status_) {
          error_status_ = ToGrpcStatus(output.error.ok() ? InternalError("the engine failed")
                                                         : output.error);
          if (error_status_->ok()) error_status_ = grpc::Status(grpc::INTERNAL, "engine error");
        }
      } else {
        v1::GenerateResponse& response = pending_.back();
        response.set_finish_reason(ToProto(reason));
        response.set_stop_string(output.stop_string);
        v1::Usage* usage = response.mutable_usage();
        usage->set_prompt_tokens(static_cast<uint32_t>(output.usage.prompt_tokens));
        usage->set_cached_prompt_tokens(static_cast<uint32_t>(output.usage.cached_prompt_tokens));
        usage->set_completion_tokens(static_cast<uint32_t>(output.usage.completion_tokens));
        usage->set_evicted_tokens(static_cast<uint32_t>(output.usage.evicted_tokens));
        if (output.cumulative_logprob) response.set_cumulative_logprob(*output.cumulative_logprob);
      }
      all_finished = ++num_finished_sequences_ == num_sequences_;
      if (all_finished) {
        metrics_.ObserveRequest(num_sequences_, max_tokens_, most_generated_tokens_);
        engine_finished_ = true;
        finish_status_ = error_status_.value_or(grpc::Status::OK);
      }
    }
  }
  Pump();
  if (all_finished) Release();
}

void GenerateReactor::Pump() {
  enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
  grpc::Status status;
  {
    std::lock_guard lock(mutex_);
    if (finish_called_ || write_in_flight_) return;
    if (cancelled_) {
      action = Action::kFinish;
      status = grpc::Status(grpc::CANCELLED, "the call was cancelled");
    } else if (!pending_.empty()) {
      action = Action::kWrite;
      in_flight_ = std::move(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
    } else if (finish_status_) {
      action = Action::kFinish;
      status = *finish_status_;
    }
    if (action == Action::kFinish) finish_called_ = true;
  }
  // Outside the lock: gRPC may run reactions inline.
  if (action == Action::kWrite) StartWrite(&in_flight_);
  if (action == Action::kFinish) Finish(status);
}

void GenerateReactor::OnWriteDone(bool ok) {
  {
    std::lock_guard lock(mutex_);
    write_in_flight_ = false;
    if (!ok) cancelled_ = true;  // the stream is broken: the client is gone
  }
  if (!ok) OnCancel();
  else Pump();
}

void GenerateReactor::OnCancel() {
  std::optional<RequestId> abort_id;
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    if (engine_id_ && !engine_finished_) abort_id = engine_id_;
  }
  if (abort_id) {
    spdlog::debug("request {} cancelled by the client: aborting", request_id_);
    engine_->Abort(*abort_id);
  }
  Pump();
}

void GenerateReactor::OnDone() { Release(); }

void GenerateReactor::Release() {
  bool last = false;
  {
    std::lock_guard lock(mutex_);
    last = --holders_ == 0;
  }
  if (!last) return;
  streams_.Closed();
  delete this;
}

}  // namespace tokenmill::server
