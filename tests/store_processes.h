// The store's neighbours for end-to-end tests: a real redis-server (Debian's, with the repo's
// deploy/redis.conf) and a real HAProxy (with deploy/haproxy.cfg), each on a free loopback port
// in a temp directory of its own, killed with the test process (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace fak::test {

// A port nothing listens on now (bound and released).
int free_port();

// SIGSTOP to a child of this process, returning once it is stopped: kill() returns before the
// signal lands, and a test that goes on meanwhile races the process it meant to freeze.
void stop_child(pid_t pid);

class RedisProcess {
 public:
  // extra: more redis-server arguments (e.g. "--replicaof 127.0.0.1 6379").
  explicit RedisProcess(std::string extra = "");
  ~RedisProcess();  // kills it and removes its directory
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // SIGTERM (Redis writes its append-only file and exits), waited for.
  void stop();
  // Again on the same port and directory: it reads its data back.
  void start();
  // SIGKILL, as a crash (or an OOM kill) ends it.
  void kill();
  // SIGKILL, its data files removed, and started again: a Redis without persistence restarted,
  // or a failover to an empty replica.
  void restart_empty();
  // SIGSTOP (returning once it is stopped) / SIGCONT: a store that is there but does not answer.
  void pause();
  void resume();
  // redis-cli -p PORT args..., stdout (args are passed to /bin/sh: quote as needed).
  std::string cli(const std::string& args) const;
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string extra_;
  std::filesystem::path dir_;
};

// A redis-sentinel (Debian's redis-sentinel) watching one primary named "fakmain", quick to call a
// failover (down after 1 s) so that tests can kill the primary and see one.
class SentinelProcess {
 public:
  SentinelProcess(int primary_port, int quorum);
  ~SentinelProcess();
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  int port() const { return port_; }
  // The port of the primary this sentinel names now (0 when it names none).
  int primary_port() const;
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::filesystem::path dir_;
};

class HaproxyProcess {
 public:
  // deploy/haproxy.cfg in front of replicas on these loopback ports (at most 4).
  explicit HaproxyProcess(const std::vector<int>& replica_ports);
  ~HaproxyProcess();
  HaproxyProcess(const HaproxyProcess&) = delete;
  HaproxyProcess& operator=(const HaproxyProcess&) = delete;

  int port() const { return port_; }
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::filesystem::path dir_;
};

}  // namespace fak::test
