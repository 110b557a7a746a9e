#include "server/openai/upstream_call.h"

#include <functional>

namespace tokenmill::gateway {

namespace asio = boost::asio;

EventQueue::EventQueue(asio::any_io_executor strand) : strand_(strand), wake_(strand) {}

void EventQueue::Push(UpstreamEvent event) {
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
  co_return event;
}

GenerateCall::GenerateCall(Backend& backend, v1::GenerateRequest request,
                           std::shared_ptr<EventQueue> events, size_t call_index,
                           CallRegistry& registry)
    : lease_(backend),
      request_(std::move(request)),
      events_(std::move(events)),
      call_index_(call_index),
      registry_(registry) {}

std::shared_ptr<GenerateCall> GenerateCall::Start(Backend& backend, v1::GenerateRequest request,
                                                  std::shared_ptr<EventQueue> events,
                                                  size_t call_index,
                                                  CallRegistry& registry) {
  std::shared_ptr<GenerateCall> call(
      new GenerateCall(backend, std::move(request), std::move(events), call_index, registry));
  call->self_ = call;
  registry.Add(call);
  backend.stub().async()->Generate(&call->context_, &call->request_, call.get());
  call->StartRead(&call->response_);
  call->StartCall();
  return call;
}

void GenerateCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended: OnDone follows
  UpstreamEvent event;
  event.call_index = call_index_;
  event.response = std::move(response_);
  response_.Clear();
  events_->Push(std::move(event));
  StartRead(&response_);
}

void GenerateCall::OnDone(const grpc::Status& status) {
  UpstreamEvent event;
  event.kind = UpstreamEvent::Kind::kDone;
  event.call_index = call_index_;
  event.status = status;
  events_->Push(std::move(event));
  registry_.Remove(this);
  std::shared_ptr<GenerateCall> last = std::move(self_);  // may delete this on return
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

void CallRegistry::CancelAll() {
  std::lock_guard lock(mutex_);
  for (const std::weak_ptr<GenerateCall>& weak : calls_) {
    if (const std::shared_ptr<GenerateCall> call = weak.lock()) call->Cancel();
  }
}

size_t CallRegistry::open() const {
  std::lock_guard lock(mutex_);
  return calls_.size();
}

namespace {

// Runs `start(done)` and suspends until gRPC calls `done(status)` on one of its threads; the
// coroutine resumes on its own executor.
template <typename Start>
asio::awaitable<grpc::Status> AwaitGrpc(Start start) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(grpc::Status)>(
      [start = std::move(start)](auto handler) mutable {
        using Handler = decltype(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        start([shared](grpc::Status status) {
          auto executor = asio::get_associated_executor(*shared);
          asio::post(executor, [shared, status = std::move(status)]() mutable {
            std::move (*shared)(std::move(status));
          });
        });
      },
      asio::use_awaitable);
}

}  // namespace

asio::awaitable<grpc::Status> AwaitTokenize(Backend& backend, const v1::TokenizeRequest& request,
                                            v1::TokenizeResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  co_return co_await AwaitGrpc([&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Tokenize(&context, &request, &response, std::move(done));
  });
}

asio::awaitable<grpc::Status> AwaitDetokenize(Backend& backend,
                                              const v1::DetokenizeRequest& request,
                                              v1::DetokenizeResponse& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  co_return co_await AwaitGrpc([&](std::function<void(grpc::Status)> done) {
    backend.stub().async()->Detokenize(&context, &request, &response, std::move(done));
  });
}

}  // namespace tokenmill::gateway
