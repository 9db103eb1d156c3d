// LineTagger: --tag's output path — reads one rank's stdout or stderr from a pipe and writes
// it on kiln-launch's own, each line prefixed with "[rank] ", lines of ranks never mixed.
#pragma once

#include <string>

namespace kiln::launch {

class LineTagger {
 public:
  LineTagger(int rank, int read_fd, int write_fd);  // takes read_fd (non-blocking)
  ~LineTagger();
  LineTagger(const LineTagger&) = delete;
  LineTagger& operator=(const LineTagger&) = delete;

  int fd() const { return read_fd_; }  // -1 once the pipe has ended
  // Reads what is there and writes out every complete line. At end of pipe, also the last
  // unterminated line (with a newline added) and the pipe is closed.
  void Pump();
  void Finish();  // Pump(), then write a partial line and stop, even if the pipe is still open

 private:
  void WriteLine(const char* data, size_t size);

  std::string prefix_;
  int read_fd_;
  int write_fd_;
  std::string partial_;
};

}  // namespace kiln::launch
