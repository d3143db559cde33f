#include "server_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "test_util.h"

namespace fak::test {

ServerProcess::ServerProcess(const std::string& extra_args, const ServerSetup& setup) {
  // A client writing to a connection the server closed (a refused body) must get EPIPE, not die.
  ::signal(SIGPIPE, SIG_IGN);
  dir_ = temp_dir();
  if (setup.before_start) setup.before_start(dir_);
  start(extra_args, setup);
}

void ServerProcess::restart(const std::string& extra_args, const ServerSetup& setup) {
  stop();
  start(extra_args, setup);
}

int ServerProcess::stop() {
  if (pid_ <= 0) return exit_code_;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

void ServerProcess::start(const std::string& extra_args_in, const ServerSetup& setup) {
  std::string extra_args = extra_args_in;
  for (size_t at; (at = extra_args.find("{dir}")) != std::string::npos;)
    extra_args.replace(at, 5, dir_.string());
  port_ = 0;
  const std::string log = (dir_ / "serve.log").string();
  ::setenv("FAK_TEST_KEYS", setup.api_keys.c_str(), 1);
  const std::string ctx = setup.ctx > 0 ? " --ctx " + std::to_string(setup.ctx) : "";
  const std::string cmd = setup.shell_prefix + " exec " + setup.wrapper + " " + FAK_BINARY +
                          " serve --port 0 -t " + std::to_string(setup.threads) + ctx +
                          " --api-key-env FAK_TEST_KEYS " +
                          (setup.quick_start ? "--kv-lazy --no-warmup " : "") + "--session-dir " +
                          (dir_ / "sessions").string() + " " + extra_args + " 2>" + log;
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 300 && port_ == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string text = read_file(log);
    const size_t at = text.find("listening on http://127.0.0.1:");
    if (at != std::string::npos) port_ = std::atoi(text.c_str() + at + 30);
  }
  if (port_ == 0) ADD_FAILURE() << "fak serve did not start: " << read_file(log);
}

ServerProcess::~ServerProcess() {
  stop();
  std::filesystem::remove_all(dir_);
}

bool ServerProcess::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  pid_ = -1;  // reaped: stop() must not signal a pid that may be another process's by now
  return false;
}

std::string ServerProcess::log() const {
  return read_file(dir_ / "serve.log");
}

long ServerProcess::peak_rss_kib() const {
  const std::string status = read_file("/proc/" + std::to_string(pid_) + "/status");
  const size_t at = status.find("VmHWM:");
  return at == std::string::npos ? 0 : std::atol(status.c_str() + at + 6);
}

}  // namespace fak::test
