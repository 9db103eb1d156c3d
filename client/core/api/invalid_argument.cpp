#include "client/core/api/invalid_argument.h"

#include <string>

namespace kiln::client {

Status InvalidArgument(std::string_view what) { return Status(StatusCode::kInvalidArgument, std::string(what)); }

Status InvalidArgument(std::string_view name, std::string_view what) {
  std::string message;
  message.reserve(name.size() + 2 + what.size());
  message.append(name).append(": ").append(what);
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

}  // namespace kiln::client
