// A `fak serve` child process for end-to-end tests: the real binary on a free loopback port (read
// from its "listening on" line), API keys "key-a" and "key-b", a session folder in a fresh temp
// directory. It dies with the test process (PR_SET_PDEATHSIG), so a crashed test leaves no server.
// It can be stopped and started again in the same directory, as a server is restarted.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>

namespace fak::test {

struct ServerSetup {
  std::string shell_prefix;  // run before exec, e.g. "ulimit -f 40;"
  std::string wrapper;       // the command fak runs under, e.g. "setpriv --reuid=65534 ..."
  // Runs after the temp directory exists and before the server starts (e.g. to plant files in
  // dir / "sessions").
  std::function<void(const std::filesystem::path& dir)> before_start;
  int ctx = 512;                         // --ctx; 0 = the model's
  std::string api_keys = "key-a,key-b";  // the accepted keys, comma-separated
  int threads = 1;                       // -t
  // --kv-lazy --no-warmup: test servers start at once (the default start maps the whole KV budget
  // and runs a warm-up; ServerKvBudget.ServeMapsTheBudgetAndWarmsUpBeforeListening tests it).
  bool quick_start = true;
};

class ServerProcess {
 public:
  // "{dir}" in extra_args stands for dir() (e.g. "--cache-dir {dir}/cache").
  explicit ServerProcess(const std::string& extra_args, const ServerSetup& setup = {});
  ~ServerProcess();  // stops the server if it runs, and removes dir()

  // SIGTERM, as a user stops a server, and waits for it; returns its exit code (128 + the signal
  // if a signal ended it; the earlier code if it had ended already). The log stays readable until
  // the next start.
  int stop();
  // Stops it if it runs and starts it again in the same directory; before_start does not run.
  void restart(const std::string& extra_args, const ServerSetup& setup = {});
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool alive();
  std::filesystem::path dir() const { return dir_; }
  std::string log() const;
  // The server's peak resident memory so far (VmHWM), in KiB; 0 if unknown.
  long peak_rss_kib() const;

 private:
  void start(const std::string& extra_args, const ServerSetup& setup);
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int port_ = 0;
  std::filesystem::path dir_;
};

// A test suite whose tests share one server with two slots (the common case): started before the
// suite's first test, stopped after its last.
class TwoSlotServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess("--parallel 2"); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static inline ServerProcess* server_ = nullptr;
};

}  // namespace fak::test
