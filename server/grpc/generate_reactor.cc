#include "server/grpc/generate_reactor.h"

#include <spdlog/spdlog.h>

#include "server/grpc/status_conversion.h"

namespace tokenmill::server {
namespace {

v1::FinishReason ToProto(CompletionReason reason) {
  switch (reason) {
    case CompletionReason::kStop: return v1::FINISH_REASON_STOP;
    case CompletionReason::kLength: return v1::FINISH_REASON_LENGTH;
    case CompletionReason::kAbort: return v1::FINISH_REASON_ABORT;
    case CompletionReason::kError: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

GenerateReactor::GenerateReactor(Engine& engine, RequestMetrics& metrics, StreamCounter& streams,
                                 std::string request_id)
    : engine_(engine), metrics_(metrics), streams_(streams), request_id_(std::move(request_id)) {
  streams_.Opened();
}

void GenerateReactor::Start(GenerateRequest request) {
  request.sink = [this](GenerateOutput&& output) { OnOutput(std::move(output)); };
  {
    // Held by the engine (until its final event) and by this call: the engine may finish
    // the request, and gRPC end the call, before Submit returns.
    std::lock_guard lock(mutex_);
    holders_ += 2;
  }
  StatusOr<RequestId> id = engine_.Submit(std::move(request));
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
  if (abort_now) engine_.Abort(*id);
  Release();
}

void GenerateReactor::OnOutput(GenerateOutput&& output) {
  {
    std::lock_guard lock(mutex_);
    if (!has_pending_) {
      pending_.Clear();
      pending_.set_request_id(request_id_);
    }
    has_pending_ = true;
    pending_.mutable_token_ids()->Add(output.token_ids.begin(), output.token_ids.end());
    pending_.mutable_text()->append(output.text);
    if (output.finished) {
      engine_finished_ = true;
      const CompletionReason reason = output.finish_reason.value_or(CompletionReason::kError);
      metrics_.ObserveFinished(output.timings, reason);
      spdlog::debug("request {} finished: {}, {} prompt + {} generated tokens", request_id_,
                    CompletionReasonName(reason), output.usage.prompt_tokens,
                    output.usage.completion_tokens);
      if (reason == CompletionReason::kError) {
        finish_status_ = ToGrpcStatus(output.error.ok() ? InternalError("the engine failed")
                                                        : output.error);
        if (finish_status_->ok()) finish_status_ = grpc::Status(grpc::INTERNAL, "engine error");
      } else {
        final_pending_ = true;
        pending_.set_finish_reason(ToProto(reason));
        pending_.set_stop_string(output.stop_string);
        v1::Usage* usage = pending_.mutable_usage();
        usage->set_prompt_tokens(static_cast<uint32_t>(output.usage.prompt_tokens));
        usage->set_cached_prompt_tokens(static_cast<uint32_t>(output.usage.cached_prompt_tokens));
        usage->set_completion_tokens(static_cast<uint32_t>(output.usage.completion_tokens));
        finish_status_ = grpc::Status::OK;
      }
      // Nothing left to write but an empty error chunk.
      if (!final_pending_ && pending_.token_ids().empty() && pending_.text().empty()) {
        has_pending_ = false;
      }
    }
  }
  Pump();
  if (output.finished) Release();
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
    } else if (has_pending_) {
      action = Action::kWrite;
      in_flight_.Swap(&pending_);
      has_pending_ = false;
      final_pending_ = false;
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
    engine_.Abort(*abort_id);
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
