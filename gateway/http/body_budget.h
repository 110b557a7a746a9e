// The memory of request bodies being received, across all of the gateway's connections: one
// budget (--body-buffer-size) that each body draws on as its bytes arrive and gives back once
// it is read. Beast's string_body reserved a body's declared Content-Length before a byte of it
// came: 20 clients that declared 8 MB and sent nothing held 140 MB. BudgetedBody grows with
// what was received, and stops at the budget.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tokenmill::gateway {

class BodyBudget {
 public:
  explicit BodyBudget(size_t max_bytes) : max_bytes_(max_bytes) {}

  size_t max_bytes() const { return max_bytes_; }
  size_t in_use() const { return in_use_.load(std::memory_order_relaxed); }

  // Takes `bytes` when they fit under the budget; false (nothing taken) otherwise.
  bool TryTake(size_t bytes);
  void Give(size_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  const size_t max_bytes_;
  std::atomic<size_t> in_use_{0};
};

// What one body holds of the budget, given back when it ends (the body read, refused or
// abandoned). On its connection's strand only.
class BodyCharge {
 public:
  explicit BodyCharge(BodyBudget& budget) : budget_(budget) {}
  ~BodyCharge() { budget_.Give(bytes_); }
  BodyCharge(const BodyCharge&) = delete;
  BodyCharge& operator=(const BodyCharge&) = delete;

  // False, and refused() from then on, when the budget has no room for `bytes` more; what the
  // body held goes back to the budget then.
  bool Grow(size_t bytes);
  bool refused() const { return refused_; }

 private:
  BodyBudget& budget_;
  size_t bytes_ = 0;
  bool refused_ = false;
};

// A Beast body: the text of a request body, grown by the bytes received (never reserved for the
// declared length), each growth charged to `charge` when one is set. Over the budget the read
// ends with boost::asio::error::no_buffer_space and charge->refused() says why.
struct BudgetedBody {
  struct value_type {
    std::string text;
    BodyCharge* charge = nullptr;
  };

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& error) {
      error = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& error) {
      const size_t bytes = boost::asio::buffer_size(buffers);
      if (body_.charge != nullptr && !body_.charge->Grow(bytes)) {
        body_.text = std::string();  // refused: its budget went back, so goes its memory
        error = boost::asio::error::no_buffer_space;
        return 0;
      }
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        const boost::asio::const_buffer buffer = *it;
        body_.text.append(static_cast<const char*>(buffer.data()), buffer.size());
      }
      error = {};
      return bytes;
    }

    void finish(boost::beast::error_code& error) { error = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace tokenmill::gateway
