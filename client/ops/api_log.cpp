#include "client/ops/api_log.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kiln::client {

int ApiLogLevel() {
  static const int level = [] {
    const char* value = std::getenv("KILN_LOGLEVEL");
    return value != nullptr ? std::atoi(value) : 0;
  }();
  return level;
}

void LogOpCall(const char* api,
               std::initializer_list<std::pair<const char*, const TensorView*>> tensors,
               double eps, void* stream) {
  const int level = ApiLogLevel();
  if (level <= 0) return;
  std::string line = std::string("[kiln api] ") + api;
  if (level >= 3) {
    line += "(";
    for (const auto& [name, t] : tensors) {
      char pointer[32];
      std::snprintf(pointer, sizeof(pointer), "%p", t->data);
      line += std::string(name) + "=" + t->Describe() + " @" + pointer + ", ";
    }
    char rest[96];
    if (std::isnan(eps))  // an op without eps
      std::snprintf(rest, sizeof(rest), "stream=%p)", stream);
    else
      std::snprintf(rest, sizeof(rest), "eps=%g, stream=%p)", eps, stream);
    line += rest;
  }
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines of threads don't mix
}

}  // namespace kiln::client
