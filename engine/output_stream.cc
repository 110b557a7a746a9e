#include "engine/output_stream.h"

namespace tokenmill {

OutputSink OutputStream::Sink() {
  return [this](GenerateOutput&& output) { Push(std::move(output)); };
}

void OutputStream::Push(GenerateOutput&& output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(output));
  }
  cv_.notify_one();
  if (on_push_) on_push_();
}

GenerateOutput OutputStream::Next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !queue_.empty(); });
  GenerateOutput output = std::move(queue_.front());
  queue_.pop_front();
  return output;
}

std::optional<GenerateOutput> OutputStream::NextFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [this] { return !queue_.empty(); })) return std::nullopt;
  GenerateOutput output = std::move(queue_.front());
  queue_.pop_front();
  return output;
}

std::optional<GenerateOutput> OutputStream::TryNext() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  GenerateOutput output = std::move(queue_.front());
  queue_.pop_front();
  return output;
}

}  // namespace tokenmill
