#include "server/daemon/open_file_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::server {

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit out;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    out.problem = absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno));
    return out;
  }
  out.soft = limit.rlim_cur;
  out.hard = limit.rlim_max;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      out.soft = raised.rlim_cur;
    } else {
      out.problem = absl::StrCat("setrlimit(RLIMIT_NOFILE, ", limit.rlim_max, "): ", std::strerror(errno));
    }
  }
  return out;
}

}  // namespace kiln::server
