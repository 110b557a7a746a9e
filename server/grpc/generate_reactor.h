// One Generate call: a gRPC ServerWriteReactor fed by the engine's output events (of each
// of the request's n sequences; every response carries its sequence's index). A chat
// request's output may be parsed (by the engine: GenerateRequest::output_parsing):
// responses then carry the content as text, the reasoning and the tool-call deltas, and a
// sequence that ended with tool calls (or whose turn the engine ended after its one call)
// finishes with FINISH_REASON_TOOL_CALLS. Logprobs carry each token's text.
//
// The engine calls the sink on its own thread; the sink only merges the event into the
// pending response and starts a write when none is in flight (one write in flight, no
// thread per stream). A client cancel or an expired deadline aborts the engine request,
// which frees its KV blocks within one step. The reactor deletes itself once gRPC is done
// with it (OnDone) AND the engine has sent the request's final event; it holds its model (a
// ModelLease) until then.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/grpc/model_registry.h"
#include "server/grpc/stream_counter.h"
#include "server/metrics/request_metrics.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::server {

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(RequestMetrics& metrics, StreamCounter& streams, std::string request_id);

  // For a request built on another thread, or once its model is loaded: Hold keeps the reactor
  // alive meanwhile, even if gRPC ends the call; StartBuilt submits the request to `model`'s
  // engine (its sink is set here), or finishes the call with the error (the build's, the
  // model's load, or the engine's refusal), and drops that hold.
  void Hold();
  void StartBuilt(ModelLease model, StatusOr<ValidatedRequest> built);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~GenerateReactor() override = default;

  // Engine thread.
  void OnOutput(GenerateOutput&& output);
  // The unwritten response to merge sequence `index`'s event into. mutex_ held.
  v1::GenerateResponse& PendingFor(int index);
  // The event's text, reasoning and tool-call deltas into `response`.
  static void AddText(GenerateOutput& output, v1::GenerateResponse& response);
  // One token's logprobs on the wire, each token with its text.
  void ToWire(const TokenLogprobs& logprobs, v1::TokenLogprobs& wire) const;
  // The event's logprobs into `response`.
  void AddLogprobs(const GenerateOutput& output, v1::GenerateResponse& response) const;
  // The event's prompt entries into pending responses of at most kPromptLogprobsPerResponse
  // each (a long prompt's stay under gRPC's 4 MB message limit). mutex_ held.
  void AddPromptLogprobs(const GenerateOutput& output);
  // Starts the next write, or finishes the call, when the state allows it. Any thread.
  void Pump();
  // Drops one of the two holders (gRPC, engine); the last deletes the reactor.
  void Release();
  void Start(ValidatedRequest request);

  // Set by StartBuilt, before the request reaches the engine; the tokenizer gives the
  // logprobs' token texts.
  ModelLease model_;
  Engine* engine_ = nullptr;
  RequestMetrics& metrics_;
  StreamCounter& streams_;
  const std::string request_id_;

  std::mutex mutex_;
  // gRPC until OnDone; Start adds the engine (until its final event); Hold the builder.
  int holders_ = 1;
  std::optional<RequestId> engine_id_;   // once submitted
  int num_sequences_ = 1;                // the request's n
  int num_finished_sequences_ = 0;       // final events arrived
  int max_tokens_ = 0;                   // the request's max_tokens, for metrics
  int most_generated_tokens_ = 0;        // by one of its sequences, for metrics
  bool engine_finished_ = false;         // every sequence's final event arrived
  // Events not yet written, merged per sequence while consecutive; a sequence's final
  // response carries its finish reason and usage.
  std::deque<v1::GenerateResponse> pending_;
  std::optional<grpc::Status> error_status_;   // the first sequence that failed
  std::optional<grpc::Status> finish_status_;  // how to finish once everything is written
  bool cancelled_ = false;               // by the client, a deadline or a failed write
  bool write_in_flight_ = false;
  bool finish_called_ = false;
  v1::GenerateResponse in_flight_;       // the message being written
};

}  // namespace tokenmill::server
