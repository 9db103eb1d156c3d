#include "client/ranks/line_tagger.h"

#include <unistd.h>

#include <cerrno>

namespace kiln::launch {
namespace {

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone: nothing better to do than drop it
    done += static_cast<size_t>(n);
  }
}

}  // namespace

LineTagger::LineTagger(int rank, int read_fd, int write_fd)
    : prefix_("[" + std::to_string(rank) + "] "), read_fd_(read_fd), write_fd_(write_fd) {}

LineTagger::~LineTagger() {
  if (read_fd_ >= 0) ::close(read_fd_);
}

void LineTagger::WriteLine(const char* data, size_t size) {
  // One write per line: lines from different ranks interleave but are never torn apart.
  std::string line = prefix_;
  line.append(data, size);
  line.push_back('\n');
  WriteAll(write_fd_, line);
}

void LineTagger::Pump() {
  char buffer[65536];
  while (read_fd_ >= 0) {
    ssize_t n = ::read(read_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      if (!partial_.empty()) WriteLine(partial_.data(), partial_.size());
      partial_.clear();
      ::close(read_fd_);
      read_fd_ = -1;
      return;
    }
    partial_.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      WriteLine(partial_.data() + start, nl - start);
    partial_.erase(0, start);
  }
}

void LineTagger::Finish() {
  Pump();
  if (read_fd_ < 0) return;
  if (!partial_.empty()) WriteLine(partial_.data(), partial_.size());
  partial_.clear();
  ::close(read_fd_);
  read_fd_ = -1;
}

}  // namespace kiln::launch
