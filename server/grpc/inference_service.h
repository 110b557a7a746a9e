// The tokenmill.v1.Inference service on gRPC's callback API. It answers UNAVAILABLE until a
// model is attached (the server starts listening before the model loads, so health checks
// see NOT_SERVING) and refuses new Generate calls once draining begins. With an API key, every
// call without "authorization: Bearer <key>" gets UNAUTHENTICATED before anything else runs;
// a call names its tenant only with the key (server/grpc/caller_identity.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/grpc/caller_identity.h"
#include "server/grpc/embed_reactor.h"
#include "server/grpc/request_builder.h"
#include "server/grpc/serving_model.h"
#include "server/grpc/stream_counter.h"
#include "server/metrics/request_metrics.h"
#include "tokenmill/v1/inference.grpc.pb.h"

namespace tokenmill::server {

class InferenceService final : public v1::Inference::CallbackService {
 public:
  // `api_key`: empty for none. `shared_prefix_cache`: tenants share cached prompt prefixes
  // (--shared-prefix-cache); otherwise each tenant's are its own (PrefixCacheSalt).
  InferenceService(RequestMetrics& metrics, std::string api_key, bool shared_prefix_cache)
      : metrics_(metrics),
        api_key_(std::move(api_key)),
        shared_prefix_cache_(shared_prefix_cache) {}

  // Serves `model` from now on; it must outlive the calls (wait for the streams to end).
  void Attach(ServingModel* model) { model_.store(model, std::memory_order_release); }
  // New Generate, Embed and Rerank calls answer UNAVAILABLE from now on; open calls go on.
  void BeginDrain() { draining_.store(true, std::memory_order_release); }
  StreamCounter& streams() { return streams_; }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context,
                                   const v1::RerankRequest* request,
                                   v1::RerankResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  // Embed's and Rerank's common path: the caller, its priority and the drain checked, the
  // engine requests built by `build`, then one EmbedReactor over them whose results `write`
  // puts into the response (with the request id).
  template <typename Request>
  grpc::ServerUnaryReactor* StartPooling(
      grpc::CallbackServerContext* context, const Request& request, const char* id_prefix,
      const std::function<StatusOr<std::vector<ValidatedRequest>>(const ServingModel&,
                                                                  const RequestContext&)>& build,
      const std::function<void(const std::string&, std::vector<EmbedReactor::Result>&)>& write);
  // The attached model, or null with `status` set to why calls cannot be served: a missing
  // or wrong API key, a tenant the call may not name, or a model still loading. `caller`:
  // who the call comes from.
  const ServingModel* ModelOrStatus(const grpc::CallbackServerContext* context,
                                    grpc::Status& status, CallerIdentity& caller) const;
  const ServingModel* ModelOrStatus(const grpc::CallbackServerContext* context,
                                    grpc::Status& status) const {
    CallerIdentity caller;
    return ModelOrStatus(context, status, caller);
  }

  RequestMetrics& metrics_;
  const std::string api_key_;
  const bool shared_prefix_cache_;
  std::atomic<const ServingModel*> model_{nullptr};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_number_{1};
  StreamCounter streams_;
};

}  // namespace tokenmill::server
