// gRPC calls to a backend, bridged onto an HTTP connection's strand: a Generate stream on the
// callback (reactor) API pushes its responses into the connection's EventQueue, and unary
// calls are awaitable. gRPC's threads never touch the connection; they only post to its
// strand, so nothing blocks an I/O thread.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "gateway/backends/backend_pool.h"
#include "gateway/gateway_metrics.h"
#include "tokenmill/v1/inference.grpc.pb.h"

namespace tokenmill::gateway {

// The gRPC metadata that names a backend call's tenant (never sent empty: "" is anonymous).
inline constexpr char kTenantMetadata[] = "x-tokenmill-tenant";

struct UpstreamEvent {
  enum class Kind { kResponse, kDone, kClientGone };
  Kind kind = Kind::kResponse;
  size_t call_index = 0;  // which of the request's Generate calls
  v1::GenerateResponse response;  // kResponse
  grpc::Status status;            // kDone
};

// Backend responses one HTTP request may hold before its Generate calls stop reading: a
// client that reads slowly (or not at all) then holds back the backend's stream (gRPC flow
// control) instead of growing the gateway's memory.
inline constexpr size_t kMaxBufferedResponses = 32;

// Events for one HTTP request, in arrival order. Push from any thread; Next() on the strand.
class EventQueue : public std::enable_shared_from_this<EventQueue> {
 public:
  EventQueue(boost::asio::any_io_executor strand, GatewayMetrics& metrics,
             size_t max_buffered = kMaxBufferedResponses);
  ~EventQueue();

  void Push(UpstreamEvent event);  // any thread
  void PushOnStrand(UpstreamEvent event);
  boost::asio::awaitable<UpstreamEvent> Next();

  // For a call that just pushed a response (any thread): true when max_buffered responses
  // are waiting; the call must then not read on until `resume` runs, which Next() does (on
  // the strand) once the reader has taken the queue down to half.
  bool PauseIfFull(std::function<void()> resume);

 private:
  boost::asio::any_io_executor strand_;
  std::deque<UpstreamEvent> events_;  // on the strand
  boost::asio::steady_timer wake_;
  GatewayMetrics& metrics_;
  const size_t max_buffered_;
  std::mutex mutex_;
  size_t buffered_ = 0;                        // responses pushed, not yet taken; by mutex_
  std::vector<std::function<void()>> paused_;  // by mutex_
};

class GenerateCall;

// The backend calls still open (Generate streams and unary calls), so that shutdown can cancel
// them and wait for their end: gRPC reports each to a connection's strand, whose io_context
// must outlive the report. After CancelAll, calls that start are cancelled at once.
class CallRegistry {
 public:
  void Add(const std::shared_ptr<GenerateCall>& call);
  void Remove(const GenerateCall* call);
  // A unary call's context from its start; UnaryAnswered before its coroutine may resume (and
  // destroy the context), UnaryEnded once gRPC's thread is done with the connection's executor.
  void AddUnary(grpc::ClientContext* context);
  void UnaryAnswered(grpc::ClientContext* context);
  void UnaryEnded();
  void CancelAll();
  size_t open() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::weak_ptr<GenerateCall>> calls_;
  std::vector<grpc::ClientContext*> unanswered_;  // unary calls gRPC has not answered
  size_t unary_open_ = 0;                          // unary calls whose callback has not ended
  bool cancelled_ = false;
};

// One Generate stream, for `tenant` (none when empty). Keeps itself alive until gRPC's
// OnDone, which it reports as the last event; Cancel() (any thread, any time) makes the server
// abort the request. It reads the next response only while its EventQueue has room (a hold
// lets it resume outside a reaction).
class GenerateCall : public grpc::ClientReadReactor<v1::GenerateResponse>,
                     public std::enable_shared_from_this<GenerateCall> {
 public:
  static std::shared_ptr<GenerateCall> Start(Backend& backend, std::string_view tenant,
                                             v1::GenerateRequest request,
                                             std::shared_ptr<EventQueue> events,
                                             size_t call_index, CallRegistry& registry);
  void Cancel();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  GenerateCall(Backend& backend, v1::GenerateRequest request, std::shared_ptr<EventQueue> events,
               size_t call_index, CallRegistry& registry);
  // Starts the next read unless one is running (exactly once per pause).
  void ResumeRead();

  BackendLease lease_;
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  std::shared_ptr<EventQueue> events_;
  const size_t call_index_;
  CallRegistry& registry_;
  std::shared_ptr<GenerateCall> self_;  // until OnDone
  std::atomic<bool> paused_{false};     // no read started since the last OnReadDone
};

inline constexpr auto kUnaryTimeout = std::chrono::seconds(30);

// Unary calls for `tenant` (none when empty), open in `calls` until answered; each resumes the
// awaiting coroutine on its own executor.
boost::asio::awaitable<grpc::Status> AwaitTokenize(Backend& backend, CallRegistry& calls,
                                                   std::string_view tenant,
                                                   const v1::TokenizeRequest& request,
                                                   v1::TokenizeResponse& response);
boost::asio::awaitable<grpc::Status> AwaitDetokenize(Backend& backend, CallRegistry& calls,
                                                     std::string_view tenant,
                                                     const v1::DetokenizeRequest& request,
                                                     v1::DetokenizeResponse& response);

// Embed's and Rerank's inputs wait in the server's queue and run in its batch as a
// generation's prompts do: longer than kUnaryTimeout, as long as the openai package waits by
// default.
inline constexpr auto kEmbedTimeout = std::chrono::minutes(10);
boost::asio::awaitable<grpc::Status> AwaitEmbed(Backend& backend, CallRegistry& calls,
                                                std::string_view tenant,
                                                const v1::EmbedRequest& request,
                                                v1::EmbedResponse& response);
boost::asio::awaitable<grpc::Status> AwaitRerank(Backend& backend, CallRegistry& calls,
                                                 std::string_view tenant,
                                                 const v1::RerankRequest& request,
                                                 v1::RerankResponse& response);

}  // namespace tokenmill::gateway
