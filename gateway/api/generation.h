// The generation driver every generating route shares (chat and text completions, Responses,
// Messages): one request's Generate calls (one per prompt of a completions request, else one)
// routed to one backend, a chat without max_tokens given the rest of its context, the calls
// started over one event queue on the connection's strand, the client's socket watched, and
// every way the calls end mapped to one error. The APIs differ only in how they render the
// responses (their handlers); what comes out of here is the same for all of them.
//
// Every request is its tenant's (the exchange's): a priority below the default needs a key
// marked `priority` (403 otherwise), the tenant's limits admit it or refuse it with 429
// (gateway/tenants/tenant_limiter.h: it reserves max_tokens per sequence and is charged the
// prompt and generated tokens it used), and its calls name the tenant to the server.
//
// Errors, the same in every dialect: the first call to fail cancels the others and its gRPC
// status becomes the HTTP error (FromGrpcStatus); a sequence the server aborted (it shut down
// before finishing) is a 503 `aborted` that says to retry, and cancels the others too.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/backends/backend_pool.h"
#include "gateway/backends/upstream_call.h"
#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"
#include "gateway/tenants/tenant_limiter.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

class Generation {
 public:
  struct Params {
    // One per prompt; their request_ids are set here (request_id, or request_id-i for each of
    // several).
    std::vector<v1::GenerateRequest> generates;
    std::string model;  // empty: any backend; a LoRA adapter's name: a backend that has it
    std::string affinity_key;
    std::string request_id;
    // The body field that set a structured-output constraint: named in the server's refusal.
    std::string structured_output_param;
  };

  // Admits the request for its tenant, routes it, gives each chat without max_tokens the rest
  // of the context and starts the calls, watching the client's socket. A refusal (403
  // priority, 429 tenant limit, 503 no backend, 404 unknown model) is written to the client in
  // `request`'s dialect, and the result is null.
  static boost::asio::awaitable<std::unique_ptr<Generation>> Start(HttpExchange& exchange,
                                                                   const HttpRequest& request,
                                                                   Params params);

  // The model that answers by its API name: the LoRA adapter the request named, else the
  // backend's name for its model.
  const std::string& model() const { return model_; }
  // What the calls' `model` field says: the adapter or other served model the request named,
  // empty for the backend's default model. Further calls for the request name it too.
  const std::string& called_model() const { return called_model_; }
  Backend& backend() const { return backend_; }

  // A response and the call (prompt) it belongs to.
  struct Output {
    size_t call_index = 0;
    v1::GenerateResponse response;
  };
  // The next response of any call; none once every call has ended (failure() and
  // client_gone() say how).
  boost::asio::awaitable<std::optional<Output>> Next();

  // A write to the client failed: the calls are cancelled (Next() still runs to their end).
  void ClientGone();
  // The request cannot be answered (a call the handler made beside the generation failed):
  // the calls are cancelled and failure() is `error`, unless one failed first.
  void Fail(HttpError error);
  bool client_gone() const { return client_gone_; }
  // The error the client should see, once a call failed or was aborted.
  const std::optional<HttpError>& failure() const { return failure_; }

 private:
  Generation(HttpExchange& exchange, Backend& backend, std::string model,
             std::string structured_output_param)
      : exchange_(exchange),
        backend_(backend),
        model_(std::move(model)),
        structured_output_param_(std::move(structured_output_param)) {}

  void CancelAll();
  // Charges the tenant what `response` adds to the tokens used.
  void Count(size_t call_index, const v1::GenerateResponse& response);

  HttpExchange& exchange_;
  Backend& backend_;
  std::string model_;
  std::string called_model_;
  std::string structured_output_param_;
  std::shared_ptr<EventQueue> events_;
  std::vector<std::shared_ptr<GenerateCall>> calls_;
  size_t open_calls_ = 0;
  bool client_gone_ = false;
  std::optional<HttpError> failure_;
  TenantLimiter::Admission admission_;
  std::vector<int64_t> prompt_tokens_;  // per call (its sequences share the prompt)
  int64_t generated_tokens_ = 0;
};

}  // namespace tokenmill::gateway
