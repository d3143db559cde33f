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

class RedisProcess {
 public:
  RedisProcess();
  ~RedisProcess();  // kills it and removes its directory
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // SIGTERM (Redis writes its append-only file and exits), waited for.
  void stop();
  // Again on the same port and directory: it reads its data back.
  void start();
  // SIGSTOP / SIGCONT: a store that is there but does not answer.
  void pause();
  void resume();
  // redis-cli -p PORT args..., stdout (args are passed to /bin/sh: quote as needed).
  std::string cli(const std::string& args) const;
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
