// CallLog: where call-log records go (KILN_LOGDEST) and how they get there. A record is the
// lines one step of a call produces together (the call's start, one launch, its end); each is
// one write(), so the records of concurrent threads never interleave, and it is out of the
// process before the call goes on (written with write(2), or fwrite + fflush for stdout), so
// a crash right after the launch cannot lose it.
//
// Destinations: "stderr" (default), "stdout", or a file path in which "%p" becomes the process
// id ("%%" a percent sign); the file is opened on the first record (level 0 never creates it)
// with O_APPEND | O_CLOEXEC, and opened again under the new name in a forked child. A path
// that cannot be opened gets one warning on stderr, and the log goes to stderr.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>

namespace kiln::client::diag {

// `dest` with "%p" replaced by `pid` and "%%" by "%".
std::string ExpandLogPath(const std::string& dest, pid_t pid);

class CallLog {
 public:
  static CallLog& Global();  // the destination of Config().dest

  explicit CallLog(std::string dest);
  ~CallLog();
  CallLog(const CallLog&) = delete;
  CallLog& operator=(const CallLog&) = delete;

  // Writes `record` (ends in '\n') in one piece.
  void Write(const std::string& record);

 private:
  int FileFd();  // the open file for this process, or -1 (warned) when it cannot be opened

  std::string dest_;
  std::mutex mu_;
  int fd_ = -1;
  pid_t fd_pid_ = -1;
  bool failed_ = false;
};

}  // namespace kiln::client::diag
