// One Embed or Rerank call: a unary reactor over one engine request per input, which the engine
// batches with everything else it runs. The sinks (engine thread) keep each input's vector; the
// call finishes once every submitted input has its final event, with the vectors in order
// written into the call's response, or the first error. A client cancel aborts the inputs still running. The reactor deletes itself
// once gRPC is done with it (OnDone) AND every submitted input has ended; it holds its model (a
// ModelLease) until then.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/grpc/model_registry.h"
#include "server/grpc/stream_counter.h"
#include "server/metrics/request_metrics.h"

namespace tokenmill::server {

class EmbedReactor final : public grpc::ServerUnaryReactor {
 public:
  // Each input's pooled vector (an embedding, or a reranker's head outputs) and prompt tokens.
  struct Result {
    std::vector<float> vector;
    int prompt_tokens = 0;
  };
  // Fills gRPC's response from the results, in the inputs' order, right before Finish.
  using WriteResponse = std::function<void(std::vector<Result>& results)>;

  // Each input counts in `metrics` as a finished request (prompt tokens, latency; no
  // generated token).
  EmbedReactor(RequestMetrics& metrics, StreamCounter& streams, WriteResponse write_response,
               std::string request_id);

  // Hold keeps the reactor alive until StartBuilt, even if gRPC ends the call meanwhile (its
  // model may still be loading). StartBuilt submits the inputs in order to `model`'s engine
  // (their sinks are set here); one the engine refuses stops the rest, and the call ends with
  // its status once those submitted have ended. With an error instead, the call ends with it.
  void Hold();
  void StartBuilt(ModelLease model, StatusOr<std::vector<ValidatedRequest>> inputs);

  void OnCancel() override;
  void OnDone() override { Release(); }

 private:
  ~EmbedReactor() override = default;

  // Engine thread: input `index`'s event.
  void OnOutput(size_t index, GenerateOutput&& output);
  // Finishes the call when submitting is over and no input is left running. mutex_ held
  // by the caller through `lock`, released here.
  void FinishIfDone(std::unique_lock<std::mutex>& lock);
  // Drops one holder (gRPC, Start, or a submitted input); the last deletes the reactor.
  void Release();

  ModelLease model_;
  Engine* engine_ = nullptr;  // model_'s, set (under mutex_) before the first Submit
  RequestMetrics& metrics_;
  StreamCounter& streams_;
  WriteResponse write_response_;
  const std::string request_id_;

  std::mutex mutex_;
  int holders_ = 1;  // gRPC until OnDone
  // Per input: its engine id once Submit returned, whether its final event came.
  std::vector<std::optional<RequestId>> ids_;
  std::vector<bool> ended_;
  int num_live_ = 0;  // inputs submitted (or being submitted) without their final event
  bool submitting_done_ = false;
  bool cancelled_ = false;
  bool finish_called_ = false;
  grpc::Status status_;  // the first error
  std::vector<Result> results_;
};

}  // namespace tokenmill::server
