#include "engine/output_stream.h"

namespace tokenmill {

OutputStream::OutputStream(std::function<void()> on_push) : state_(std::make_shared<State>()) {
  state_->on_push = std::move(on_push);
}

OutputSink OutputStream::Sink() {
  return [state = state_](GenerateOutput&& output) { state->Push(std::move(output)); };
}

void OutputStream::Push(GenerateOutput&& output) { state_->Push(std::move(output)); }

void OutputStream::State::Push(GenerateOutput&& output) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(output));
  }
  cv.notify_one();
  if (on_push) on_push();
}

GenerateOutput OutputStream::Next() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [this] { return !state_->queue.empty(); });
  GenerateOutput output = std::move(state_->queue.front());
  state_->queue.pop_front();
  return output;
}

std::optional<GenerateOutput> OutputStream::NextFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->cv.wait_for(lock, timeout, [this] { return !state_->queue.empty(); })) {
    return std::nullopt;
  }
  GenerateOutput output = std::move(state_->queue.front());
  state_->queue.pop_front();
  return output;
}

std::optional<GenerateOutput> OutputStream::TryNext() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->queue.empty()) return std::nullopt;
  GenerateOutput output = std::move(state_->queue.front());
  state_->queue.pop_front();
  return output;
}

}  // namespace tokenmill
