#include "server/worker_pool.h"

#include <algorithm>

namespace fak::server {

WorkerPool::WorkerPool(int threads, int max_pending) : max_pending_(std::max(0, max_pending)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() {
  stop();
}

bool WorkerPool::try_post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int idle = int(threads_.size()) - running_;
    if (stopping_ || int(tasks_.size()) >= max_pending_ + std::max(0, idle)) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

int WorkerPool::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(tasks_.size()) + running_;
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
    }
    try {
      task();
    } catch (...) {
      // A task owns its errors (the router never throws); a stray one must not end the thread.
    }
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
}

}  // namespace fak::server
