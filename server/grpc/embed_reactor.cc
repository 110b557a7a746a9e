#include "server/grpc/embed_reactor.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "server/grpc/status_conversion.h"

namespace tokenmill::server {

EmbedReactor::EmbedReactor(RequestMetrics& metrics, StreamCounter& streams,
                           WriteResponse write_response, std::string request_id)
    : metrics_(metrics),
      streams_(streams),
      write_response_(std::move(write_response)),
      request_id_(std::move(request_id)) {
  streams_.Opened();
}

void EmbedReactor::Hold() {
  std::lock_guard lock(mutex_);
  ++holders_;  // StartBuilt's, so that the last input's end cannot delete us meanwhile
}

void EmbedReactor::StartBuilt(ModelLease model,
                              StatusOr<std::vector<ValidatedRequest>> built) {
  if (!built.ok()) {
    std::unique_lock lock(mutex_);
    status_ = ToGrpcStatus(built.status());
    submitting_done_ = true;
    FinishIfDone(lock);
    Release();
    return;
  }
  std::vector<ValidatedRequest>& inputs = *built;
  {
    std::lock_guard lock(mutex_);
    model_ = std::move(model);
    engine_ = model_->engine.get();
    ids_.resize(inputs.size());
    ended_.resize(inputs.size(), false);
    results_.resize(inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    {
      std::lock_guard lock(mutex_);
      if (cancelled_ || !status_.ok()) break;
      ++holders_;  // the input's, until its final event
      ++num_live_;
    }
    inputs[i].set_sink([this, i](GenerateOutput&& output) { OnOutput(i, std::move(output)); });
    const StatusOr<RequestId> id = engine_->Submit(std::move(inputs[i]));
    bool abort_now = false;
    {
      std::lock_guard lock(mutex_);
      if (!id.ok()) {  // its sink will never be called
        --holders_;
        --num_live_;
        if (status_.ok()) status_ = ToGrpcStatus(id.status());
      } else {
        ids_[i] = *id;
        abort_now = cancelled_ && !ended_[i];
      }
    }
    if (abort_now) engine_->Abort(*id);
  }
  std::unique_lock lock(mutex_);
  submitting_done_ = true;
  FinishIfDone(lock);
  Release();
}

void EmbedReactor::OnOutput(size_t index, GenerateOutput&& output) {
  if (!output.finished) return;
  metrics_.ObserveFinished(output.timings, *output.finish_reason, output.usage);
  std::unique_lock lock(mutex_);
  ended_[index] = true;
  --num_live_;
  if (output.finish_reason == CompletionReason::kStop && !output.embedding.empty()) {
    results_[index] = Result{.vector = std::move(output.embedding),
                             .prompt_tokens = output.usage.prompt_tokens};
  } else if (status_.ok()) {
    status_ = output.finish_reason == CompletionReason::kError
                  ? ToGrpcStatus(output.error)
                  : grpc::Status(grpc::CANCELLED, "the request was aborted");
  }
  FinishIfDone(lock);
  Release();
}

void EmbedReactor::FinishIfDone(std::unique_lock<std::mutex>& lock) {
  if (!submitting_done_ || num_live_ > 0 || finish_called_) {
    lock.unlock();
    return;
  }
  finish_called_ = true;
  if (status_.ok() && cancelled_) status_ = grpc::Status(grpc::CANCELLED, "cancelled");
  if (status_.ok()) {
    write_response_(results_);
  } else {
    spdlog::debug("embed request {} failed: {}", request_id_, status_.error_message());
  }
  const grpc::Status status = status_;
  lock.unlock();
  Finish(status);
}

void EmbedReactor::OnCancel() {
  std::vector<RequestId> running;
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    for (size_t i = 0; i < ids_.size(); ++i) {
      if (ids_[i] && !ended_[i]) running.push_back(*ids_[i]);
    }
  }
  for (const RequestId id : running) engine_->Abort(id);
}

void EmbedReactor::Release() {
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
