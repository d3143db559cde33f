#include "store_processes.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "test_util.h"

namespace fak::test {

namespace {

// fork + exec of a shell command line that dies with the test process.
pid_t spawn(const std::string& cmd) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

void end(pid_t& pid, int sig) {
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  pid = -1;
}

// Whether something accepts connections on the port and answers `probe` with a reply that starts
// with `expect` ("" = connecting is enough).
bool answers(int port, const std::string& probe, const std::string& expect) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (ok && !probe.empty()) {
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ok = ::write(fd, probe.data(), probe.size()) == ssize_t(probe.size());
    char buf[64] = {};
    const ssize_t n = ok ? ::read(fd, buf, sizeof buf - 1) : -1;
    ok = n > 0 && std::string(buf, size_t(n)).rfind(expect, 0) == 0;
  }
  ::close(fd);
  return ok;
}

// A clear failure (never a skip: CI must run these) when a package is missing.
bool installed(const std::string& program) {
  if (std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) == 0) return true;
  ADD_FAILURE() << program << " is not installed: .ci/install-deps installs it "
                << "(Debian: redis-server, redis-sentinel, haproxy)";
  return false;
}

}  // namespace

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

void stop_child(pid_t pid) {
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << "status " << status;
}

RedisProcess::RedisProcess(std::string extra) : extra_(std::move(extra)) {
  ::signal(SIGPIPE, SIG_IGN);
  dir_ = temp_dir();
  port_ = free_port();
  start();
}

RedisProcess::~RedisProcess() {
  end(pid_, SIGKILL);
  std::filesystem::remove_all(dir_);
}

void RedisProcess::start() {
  if (!installed("redis-server") || !installed("redis-cli")) return;
  // The repo's configuration, on a port and directory of the test's own, with a budget that
  // makes eviction reachable. note: a copy: a failover makes Redis rewrite its config file.
  const auto conf = dir_ / "redis.conf";
  if (!std::filesystem::exists(conf))
    std::filesystem::copy_file(source_path("deploy/redis.conf"), conf);
  pid_ = spawn("exec redis-server " + conf.string() + " --port " + std::to_string(port_) +
               " --dir " + dir_.string() + " --maxmemory 512mb --logfile " +
               (dir_ / "redis.log").string() + " " + extra_);
  for (int i = 0; i < 200; ++i) {
    if (answers(port_, "PING\r\n", "+PONG")) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ADD_FAILURE() << "redis-server did not start: " << log();
}

void RedisProcess::stop() {
  end(pid_, SIGTERM);
}

void RedisProcess::kill() {
  end(pid_, SIGKILL);
}

void RedisProcess::restart_empty() {
  end(pid_, SIGKILL);
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    if (e.path().filename() != "redis.log" && e.path().filename() != "redis.conf")
      std::filesystem::remove_all(e.path());
  start();
}

void RedisProcess::pause() {
  stop_child(pid_);
}

void RedisProcess::resume() {
  ::kill(pid_, SIGCONT);
}

std::string RedisProcess::cli(const std::string& args) const {
  const std::string out = (dir_ / "cli.out").string();
  const std::string cmd =
      "redis-cli -p " + std::to_string(port_) + " " + args + " > " + out + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return "redis-cli failed: " + read_file(out);
  return read_file(out);
}

std::string RedisProcess::log() const {
  return read_file(dir_ / "redis.log");
}

SentinelProcess::SentinelProcess(int primary_port, int quorum) {
  dir_ = temp_dir();
  if (!installed("redis-sentinel")) return;
  port_ = free_port();
  // Sentinel rewrites its configuration file: a copy of the test's own.
  write_file(dir_ / "sentinel.conf",
             "port " + std::to_string(port_) + "\nbind 127.0.0.1\ndir " + dir_.string() +
                 "\nsentinel monitor fakmain 127.0.0.1 " + std::to_string(primary_port) + " " +
                 std::to_string(quorum) +
                 "\nsentinel down-after-milliseconds fakmain 1000\n"
                 "sentinel failover-timeout fakmain 4000\nsentinel parallel-syncs fakmain 1\n");
  pid_ = spawn("exec redis-sentinel " + (dir_ / "sentinel.conf").string() + " --logfile " +
               (dir_ / "sentinel.log").string());
  for (int i = 0; i < 200; ++i) {
    if (answers(port_, "PING\r\n", "+PONG")) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ADD_FAILURE() << "redis-sentinel did not start: " << log();
}

SentinelProcess::~SentinelProcess() {
  end(pid_, SIGKILL);
  std::filesystem::remove_all(dir_);
}

int SentinelProcess::primary_port() const {
  const std::string out = (dir_ / "cli.out").string();
  const std::string cmd = "redis-cli -p " + std::to_string(port_) +
                          " SENTINEL get-master-addr-by-name fakmain > " + out + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return 0;
  const std::string text = read_file(out);
  const size_t nl = text.find('\n');
  return nl == std::string::npos ? 0 : std::atoi(text.c_str() + nl + 1);
}

std::string SentinelProcess::log() const {
  return read_file(dir_ / "sentinel.log");
}

HaproxyProcess::HaproxyProcess(const std::vector<int>& replica_ports) {
  dir_ = temp_dir();
  if (!installed("haproxy")) return;
  port_ = free_port();
  std::string env = "FAK_LB_BIND=127.0.0.1:" + std::to_string(port_);
  for (size_t i = 0; i < replica_ports.size(); ++i)
    env +=
        " FAK_REPLICA_" + std::to_string(i + 1) + "=127.0.0.1:" + std::to_string(replica_ports[i]);
  pid_ = spawn(env + " exec haproxy -db -f " + source_path("deploy/haproxy.cfg").string() + " > " +
               (dir_ / "haproxy.log").string() + " 2>&1");
  for (int i = 0; i < 200; ++i) {
    if (answers(port_, "", "")) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ADD_FAILURE() << "haproxy did not start: " << log();
}

HaproxyProcess::~HaproxyProcess() {
  end(pid_, SIGKILL);
  std::filesystem::remove_all(dir_);
}

std::string HaproxyProcess::log() const {
  return read_file(dir_ / "haproxy.log");
}

}  // namespace fak::test
