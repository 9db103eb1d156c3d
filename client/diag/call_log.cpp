#include "client/diag/call_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "client/diag/diag_config.h"

namespace kiln::client::diag {
namespace {

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report it: the log itself is the report channel
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

std::string ExpandLogPath(const std::string& dest, pid_t pid) {
  std::string out;
  for (size_t i = 0; i < dest.size(); ++i) {
    if (dest[i] == '%' && i + 1 < dest.size() && dest[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else if (dest[i] == '%' && i + 1 < dest.size() && dest[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      out += dest[i];
    }
  }
  return out;
}

CallLog& CallLog::Global() {
  static CallLog* log = new CallLog(Config().dest);  // never destroyed: ops may log during exit
  return *log;
}

CallLog::CallLog(std::string dest) : dest_(std::move(dest)) {}

CallLog::~CallLog() {
  if (fd_ >= 0) ::close(fd_);
}

int CallLog::FileFd() {
  const pid_t pid = ::getpid();
  if (fd_ >= 0 && fd_pid_ == pid) return fd_;
  if (failed_) return -1;
  if (fd_ >= 0) {  // a forked child: its own file when the name has %p, else the same one
    if (dest_.find("%p") == std::string::npos) {
      fd_pid_ = pid;
      return fd_;
    }
    ::close(fd_);
    fd_ = -1;
  }
  const std::string path = ExpandLogPath(dest_, pid);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    failed_ = true;
    const std::string line = "[kiln] KILN_LOGDEST='" + dest_ + "': cannot open " + path + ": " + std::strerror(errno) +
                             "; the call log goes to stderr\n";
    WriteAll(2, line.data(), line.size());
    return -1;
  }
  fd_pid_ = pid;
  return fd_;
}

void CallLog::Write(const std::string& record) {
  if (dest_ == "stderr") {
    WriteAll(2, record.data(), record.size());
    return;
  }
  if (dest_ == "stdout") {
    // Through stdio, so the record keeps its place among the program's own buffered output.
    std::fwrite(record.data(), 1, record.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const int fd = FileFd();
  WriteAll(fd >= 0 ? fd : 2, record.data(), record.size());
}

}  // namespace kiln::client::diag
