// SIGTERM and SIGINT as an event to wait for, without a signal handler or global state:
// the signals are blocked in every thread and one thread takes them with sigwait.
// Construct it in main() before any other thread starts, so that all threads inherit the
// blocked mask.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tokenmill::server {

class ShutdownSignals {
 public:
  ShutdownSignals();
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Blocks until SIGTERM or SIGINT arrives; returns its name.
  std::string Wait();
  // Whether one has arrived.
  bool received() const;

 private:
  void Run();

  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::string signal_name_;  // empty until one arrives
  std::thread waiter_;
};

}  // namespace tokenmill::server
