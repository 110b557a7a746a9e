// A small thread-safe queue of GenerateOutput that is an OutputSink on one side and a
// blocking or polling reader on the other, with an optional hook run (on the engine thread)
// after each push, e.g. to wake a reactor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "engine/generate_output.h"

namespace tokenmill {

class OutputStream {
 public:
  explicit OutputStream(std::function<void()> on_push = nullptr) : on_push_(std::move(on_push)) {}
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  // A sink that pushes here. The stream must outlive the request's final event.
  OutputSink Sink();

  void Push(GenerateOutput&& output);
  // Waits for the next event.
  GenerateOutput Next();
  // The next event if one comes within `timeout`.
  std::optional<GenerateOutput> NextFor(std::chrono::milliseconds timeout);
  std::optional<GenerateOutput> TryNext();

 private:
  std::function<void()> on_push_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<GenerateOutput> queue_;
};

}  // namespace tokenmill
