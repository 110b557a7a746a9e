// A small thread-safe queue of GenerateOutput that is an OutputSink on one side and a
// blocking or polling reader on the other, with an optional hook run (on the engine thread)
// after each push, e.g. to wake a reactor. The queue is shared with the sinks it hands out,
// so the stream may be destroyed as soon as its reader has the final event (a push may still
// be returning); the hook must stay callable until then too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/generate_output.h"

namespace tokenmill {

class OutputStream {
 public:
  explicit OutputStream(std::function<void()> on_push = nullptr);
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  // A sink that pushes here.
  OutputSink Sink();

  void Push(GenerateOutput&& output);
  // Waits for the next event.
  GenerateOutput Next();
  // The next event if one comes within `timeout`.
  std::optional<GenerateOutput> NextFor(std::chrono::milliseconds timeout);
  std::optional<GenerateOutput> TryNext();

 private:
  struct State {
    std::function<void()> on_push;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<GenerateOutput> queue;

    void Push(GenerateOutput&& output);
  };
  // Shared with the sinks: the engine thread may still be in Push after the reader is done.
  std::shared_ptr<State> state_;
};

}  // namespace tokenmill
