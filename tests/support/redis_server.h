// RedisServer: a real redis-server for a test, on a free loopback port, keeping nothing on disk
// (no RDB snapshot, no AOF): killed at scope exit, and stopped and started again (on the same
// port, empty) on demand. Raw reads and writes go through hiredis, as kilnd's do, so a test can
// look at or damage what the daemons wrote.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/free_port.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {

class RedisServer {
 public:
  // Exits the test with KILN_TEST_SKIP_CODE when redis-server is not installed.
  RedisServer();
  ~RedisServer();

  int port() const { return port_; }
  std::string url() const;  // redis://127.0.0.1:PORT
  void Stop();              // kill -9: as abrupt as a crash or a partition
  void Start();             // again on the same port; throws when it does not answer within 10 s
  void Pause();             // SIGSTOP: connections still open, commands get no answer (a stall)
  void Resume();            // SIGCONT
  std::string Log() const { return process_ ? process_->Output() : ""; }

  // Each on a fresh connection; throw std::runtime_error when Redis does not answer.
  std::optional<std::string> Get(const std::string& key);
  void Set(const std::string& key, const std::string& value);
  std::vector<std::string> Keys(const std::string& pattern);

 private:
  TempDir dir_{"kiln-redis"};
  int port_ = 0;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace kiln::testing
