#include "client/diag/op_filter.h"

#include <fnmatch.h>

namespace kiln::client::diag {
namespace {

bool AnyMatches(const std::vector<std::string>& patterns, const std::string& op, const std::string& api) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), op.c_str(), 0) == 0 || fnmatch(p.c_str(), api.c_str(), 0) == 0) return true;
  return false;
}

}  // namespace

bool OpSelected(const std::vector<std::string>& include, const std::vector<std::string>& exclude, const std::string& op,
                const std::string& api) {
  if (!include.empty() && !AnyMatches(include, op, api)) return false;
  return !AnyMatches(exclude, op, api);
}

}  // namespace kiln::client::diag
