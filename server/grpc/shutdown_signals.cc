#include "server/grpc/shutdown_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cstring>

#include "common/check.h"

namespace tokenmill::server {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

ShutdownSignals::ShutdownSignals() {
  const sigset_t set = ShutdownSet();
  TM_CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, nullptr), 0);
  waiter_ = std::thread([this] { Run(); });
}

ShutdownSignals::~ShutdownSignals() {
  // Wake the waiter with a signal of its own when none came from outside.
  if (!received()) pthread_kill(waiter_.native_handle(), SIGTERM);
  waiter_.join();
}

void ShutdownSignals::Run() {
  const sigset_t set = ShutdownSet();
  int signal_number = 0;
  TM_CHECK_EQ(sigwait(&set, &signal_number), 0);
  std::lock_guard lock(mutex_);
  signal_name_ = signal_number == SIGINT ? "SIGINT" : "SIGTERM";
  arrived_.notify_all();
}

std::string ShutdownSignals::Wait() {
  std::unique_lock lock(mutex_);
  arrived_.wait(lock, [this] { return !signal_name_.empty(); });
  return signal_name_;
}

bool ShutdownSignals::received() const {
  std::lock_guard lock(mutex_);
  return !signal_name_.empty();
}

}  // namespace tokenmill::server
