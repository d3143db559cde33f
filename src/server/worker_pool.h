// A fixed set of threads that run the server's blocking work: route handlers that wait for the
// scheduler, and the streams they produce. Bounded twice: by the threads and by the tasks that
// may wait for one, so a flood of requests is refused (503) instead of queued without end.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fak::server {

class WorkerPool {
 public:
  WorkerPool(int threads, int max_pending);
  ~WorkerPool();  // finishes the queued tasks, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False (and the task dropped) when max_pending tasks already wait for a thread, or stopping.
  bool try_post(std::function<void()> task);
  // Runs what is queued, then joins every thread. Idempotent.
  void stop();
  // Tasks queued or running.
  int busy() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  int running_ = 0;
  int max_pending_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fak::server
