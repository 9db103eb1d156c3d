#include "client/loader/launch_hint.h"

#include <charconv>
#include <string>

namespace kiln::client {

StatusOr<int64_t> LaunchHint(const ModuleInfo& info, const char* key, int64_t lo, int64_t hi) {
  auto it = info.launch.find(key);
  if (it == info.launch.end())
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon's reply for " + info.uri + " has no launch hint \"" + key +
                      "\" (the op generator must send every hint its client reads)");
  int64_t value = 0;
  const std::string& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi)
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon's launch hint " + std::string(key) + "=\"" + text + "\" for " +
                      info.uri + " is not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  return value;
}

}  // namespace kiln::client
