#include "gateway/backends/upstream_call.h"

#include <functional>

namespace tokenmill::gateway {

namespace asio = boost::asio;

namespace {

void NameTenant(grpc::ClientContext& context, std::string_view tenant) {
  if (!tenant.empty()) context.AddMetadata(kTenantMetadata, std::string(tenant));
}

}  // namespace

EventQueue::EventQueue(asio::any_io_executor strand, GatewayMetrics& metrics,
                       size_t max_buffered)
    : strand_(strand), wake_(strand), metrics_(metrics), max_buffered_(max_buffered) {}

EventQueue::~EventQueue() { metrics_.ResponsesBuffered(-static_cast<int64_t>(buffered_)); }

void EventQueue::Push(UpstreamEvent event) {
  if (event.kind == UpstreamEvent::Kind::kResponse) {
    std::lock_guard lock(mutex_);
    ++buffered_;
    metrics_.ResponsesBuffered(1);
    metrics_.ObserveRequestBuffered(buffered_);
  }
  asio::post(strand_, [self = shared_from_this(), event = std::move(event)]() mutable {
    self->PushOnStrand(std::move(event));
  });
}

void EventQueue::PushOnStrand(UpstreamEvent event) {
  events_.push_back(std::move(event));
  wake_.cancel();
}

asio::awaitable<UpstreamEvent> EventQueue::Next() {
  // Push and Next both run on the strand: no wake-up is lost between the check and the wait.
  while (events_.empty()) {
    wake_.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ignored;
    co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  UpstreamEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.kind == UpstreamEvent::Kind::kResponse) {
    std::vector<std::function<void()>> resume;
    {
      std::lock_guard lock(mutex_);
      --buffered_;
      metrics_.ResponsesBuffered(-1);
      if (buffered_ <= max_buffered_ / 2) std::swap(resume, paused_);
    }
    for (const std::function<void()>& start_read : resume) start_read();
  }
  co_return event;
}

bool EventQueue::PauseIfFull(std::function<void()> resume) {
  std::lock_guard lock(mutex_);
  if (buffered_ < max_buffered_) return false;
  paused_.push_back(std::move(resume));
  metrics_.ReadPaused();
  return true;
}

GenerateCall::GenerateCall(Backend& backend, v1::GenerateRequest request,
                           std::shared_ptr<EventQueue> events, size_t call_index,
                           CallRegistry& registry)
    : lease_(backend),
      request_(std::move(request)),
      events_(std::move(events)),
      call_index_(call_index),
      registry_(registry) {}

std::shared_ptr<GenerateCall> GenerateCall::Start(Backend& backend, std::string_view tenant,
                                                  v1::GenerateRequest request,
                                                  std::shared_ptr<EventQueue> events,
                                                  size_t call_index,
                                                  CallRegistry& registry) {
  std::shared_ptr<GenerateCall> call(
      new GenerateCall(backend, std::move(request), std::move(events), call_index, registry));
  NameTenant(call->context_, tenant);
  call->self_ = call;
  registry.Add(call);
  backend.stub().async()->Generate(&call->context_, &call->request_, call.get());
  // Reads resumed by the EventQueue start outside a reaction: the hold keeps the stream
  // (and OnDone) waiting for them until a read reports the end.
  call->AddHold();
  call->StartRead(&call->response_);
  call->StartCall();
  return call;
}

void GenerateCall::OnReadDone(bool ok) {
  if (!ok) {  // the stream ended: OnDone follows
    RemoveHold();
    return;
  }
  UpstreamEvent event;
  event.call_index = call_index_;
  event.response = std::move(response_);
  response_.Clear();
  events_->Push(std::move(event));
  paused_.store(true);
  const bool full = events_->PauseIfFull(
      [weak = std::weak_ptr<GenerateCall>(shared_from_this())] {
        if (const std::shared_ptr<GenerateCall> call = weak.lock()) call->ResumeRead();
      });
  if (!full) ResumeRead();
}

void GenerateCall::ResumeRead() {
  if (paused_.exchange(false)) StartRead(&response_);
}

void GenerateCall::Cancel() {
  context_.TryCancel();
  // A paused call reads on, so that the cancelled stream reaches its end and OnDone.
  ResumeRead();
}

void GenerateCall::OnDone(const grpc::Status& status) {
  UpstreamEvent event;
  event.kind = UpstreamEvent::Kind::kDone;
  event.call_index = call_index_;
  event.status = status;
  events_->Push(std::move(event));
  CallRegistry& registry = registry_;
  {
    // This may be the last owner of the call and of its queue's executor: let go of both before
    // shutdown may see the call ended and destroy the io_context.
    std::shared_ptr<GenerateCall> last = std::move(self_);
  }
  registry.Remove(this);  // compares the address only
}

void CallRegistry::Add(const std::shared_ptr<GenerateCall>& call) {
  std::lock_guard lock(mutex_);
  calls_.push_back(call);
}

void CallRegistry::Remove(const GenerateCall* call) {
  std::lock_guard lock(mutex_);
  std::erase_if(calls_, [call](const std::weak_ptr<GenerateCall>& weak) {
    const std::shared_ptr<GenerateCall> live = weak.lock();
    return live == nullptr || live.get() == call;
  });
}

void CallRegistry::AddUnary(grpc::ClientContext* context) {
  std::lock_guard lock(mutex_);
  ++unary_open_;
  if (cancelled_) {
    context->TryCancel();  // gRPC cancels the call as it starts
    return;
  }
  unanswered_.push_back(context);
}

void CallRegistry::UnaryAnswered(grpc::ClientContext* context) {
  std::lock_guard lock(mutex_);
  std::erase(unanswered_, context);
}

void CallRegistry::UnaryEnded() {
  std::lock_guard lock(mutex_);
  --unary_open_;
}

void CallRegistry::CancelAll() {
  std::vector<std::shared_ptr<GenerateCall>> live;
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    // Under the lock: an answered context leaves the list before its coroutine may free it.
    for (grpc::ClientContext* context : unanswered_) context->TryCancel();
    for (const std::weak_ptr<GenerateCall>& weak : calls_) {
      if (std::shared_ptr<GenerateCall> call = weak.lock()) live.push_back(std::move(call));
    }
  }
  // Outside the lock: a cancelled read may end the call (and Remove it) on this thread.
  for (const std::shared_ptr<GenerateCall>& call : live) call->Cancel();
}

size_t CallRegistry::open() const {
  std::lock_guard lock(mutex_);
  return calls_.size() + unary_open_;
}


namespace {

// Runs `start(done)` and suspends until gRPC calls `done(status)` on one of its threads; the
// coroutine resumes on its own executor. The call is open in `calls` meanwhile.
template <typename Start>
asio::awaitable<grpc::Status> AwaitGrpc(CallRegistry& calls, grpc::ClientContext& context,
                                        Start start) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(grpc::Status)>(
      [&calls, &context, start = std::move(start)](auto handler) mutable {
        using Handler = decltype(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        calls.AddUnary(&context);
        start([shared, &calls, &context](grpc::Status status) mutable {
          calls.UnaryAnswered(&context);
          {
            auto executor = asio::get_associated_executor(*shared);
            asio::post(executor,
                       [shared = std::move(shared), status = std::move(status)]() mutable {
                         std::move (*shared)(std::move(status));
                       });
          }
          calls.UnaryEnded();  // last: shutdown waits for it before destroying the executor's io
        });
      },
      asio::use_awaitable);
}

}  // namespace

asio::awaitable<grpc::Status> AwaitTokenize(Backend& backend, CallRegistry& calls,
                                            std::string_view tenant,
                                            const v1::TokenizeRequest& request,
                                            v1::TokenizeResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  NameTenant(context, tenant);
  co_return co_await AwaitGrpc(calls, context, [&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Tokenize(&context, &request, &response, std::move(done));
  });
}

asio::awaitable<grpc::Status> AwaitDetokenize(Backend& backend, CallRegistry& calls,
                                              std::string_view tenant,
                                              const v1::DetokenizeRequest& request,
                                              v1::DetokenizeResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  NameTenant(context, tenant);
  co_return co_await AwaitGrpc(calls, context, [&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Detokenize(&context, &request, &response, std::move(done));
  });
}

asio::awaitable<grpc::Status> AwaitEmbed(Backend& backend, CallRegistry& calls,
                                         std::string_view tenant,
                                         const v1::EmbedRequest& request,
                                         v1::EmbedResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kEmbedTimeout);
  NameTenant(context, tenant);
  co_return co_await AwaitGrpc(calls, context, [&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Embed(&context, &request, &response, std::move(done));
  });
}

asio::awaitable<grpc::Status> AwaitRerank(Backend& backend, CallRegistry& calls,
                                          std::string_view tenant,
                                          const v1::RerankRequest& request,
                                          v1::RerankResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kEmbedTimeout);
  NameTenant(context, tenant);
  co_return co_await AwaitGrpc(calls, context, [&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Rerank(&context, &request, &response, std::move(done));
  });
}

}  // namespace tokenmill::gateway
