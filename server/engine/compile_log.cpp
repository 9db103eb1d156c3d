#include "server/engine/compile_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kiln::server {

std::string BoundedCompileLog(const std::string& log, size_t head, size_t tail) {
  if (log.size() <= head + tail) return log;
  // The head ends after the last newline within `head` bytes, the tail starts after the first
  // newline within the last `tail` bytes: whole lines on both sides where there are any.
  size_t head_end = log.rfind('\n', head - 1);
  head_end = (head_end == std::string::npos || head_end == 0) ? head : head_end + 1;
  size_t tail_start = log.find('\n', log.size() - tail);
  tail_start = (tail_start == std::string::npos || tail_start + 1 >= log.size()) ? log.size() - tail : tail_start + 1;
  tail_start = std::max(tail_start, head_end);
  const size_t dropped = tail_start - head_end;
  const size_t lines = size_t(std::count(log.begin() + head_end, log.begin() + tail_start, '\n'));
  std::string out = log.substr(0, head_end);
  if (!out.empty() && out.back() != '\n') out += '\n';
  absl::StrAppend(&out, "[... kiln left out ", dropped, " bytes (", lines,
                  " lines) of this compile log here: it keeps about the first ", head >> 10, " KiB and the last ",
                  tail >> 10, " KiB ...]\n");
  out.append(log, tail_start, std::string::npos);
  return out;
}

}  // namespace kiln::server
