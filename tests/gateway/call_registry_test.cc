// The gateway's CallRegistry over real gRPC calls: shutdown's CancelAll reaches unary calls
// gRPC has not answered and cancels those that start after it, and open() counts a unary
// call until its callback has let go of the connection's executor (which lives in the
// io_context shutdown destroys).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "gateway/backends/upstream_call.h"
#include "tokenmill/v1/inference.grpc.pb.h"

namespace tokenmill::gateway {
namespace {

// A TCP port that accepts connections (the kernel completes the handshake) and never answers:
// a gRPC call to it waits until its deadline or cancellation.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~SilentPort() {
    if (fd_ >= 0) close(fd_);
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::unique_ptr<v1::Inference::Stub> StubFor(const std::string& target) {
  return v1::Inference::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

// Starts Tokenize on `context` as the gateway's unary calls do; the future is its status.
std::future<grpc::Status> StartTokenize(v1::Inference::Stub& stub, CallRegistry& calls,
                                        grpc::ClientContext& context,
                                        v1::TokenizeResponse& response) {
  auto done = std::make_shared<std::promise<grpc::Status>>();
  std::future<grpc::Status> status = done->get_future();
  static const v1::TokenizeRequest request = [] {
    v1::TokenizeRequest r;
    r.set_text("Hi");
    return r;
  }();
  calls.AddUnary(&context);
  stub.async()->Tokenize(&context, &request, &response,
                         [&calls, &context, done](grpc::Status s) {
                           calls.UnaryAnswered(&context);
                           done->set_value(std::move(s));
                           calls.UnaryEnded();
                         });
  return status;
}

TEST(CallRegistry, CancelAllEndsAUnaryCallTheServerNeverAnswers) {
  SilentPort port;
  const auto stub = StubFor(port.target());
  CallRegistry calls;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  v1::TokenizeResponse response;
  std::future<grpc::Status> status = StartTokenize(*stub, calls, context, response);
  EXPECT_EQ(calls.open(), 1u);
  EXPECT_EQ(status.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  calls.CancelAll();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(status.get().error_code(), grpc::StatusCode::CANCELLED);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls.open() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(calls.open(), 0u);
}

TEST(CallRegistry, AUnaryCallStartedAfterCancelAllIsCancelled) {
  SilentPort port;
  const auto stub = StubFor(port.target());
  CallRegistry calls;
  calls.CancelAll();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  v1::TokenizeResponse response;
  std::future<grpc::Status> status = StartTokenize(*stub, calls, context, response);
  ASSERT_EQ(status.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(status.get().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(CallRegistry, OpenCountsAUnaryCallUntilItsCallbackEnds) {
  CallRegistry calls;
  grpc::ClientContext context;
  calls.AddUnary(&context);
  EXPECT_EQ(calls.open(), 1u);
  calls.UnaryAnswered(&context);
  EXPECT_EQ(calls.open(), 1u);  // the callback still holds the connection's executor
  calls.UnaryEnded();
  EXPECT_EQ(calls.open(), 0u);
}

}  // namespace
}  // namespace tokenmill::gateway
