// InvalidArgument: the one spelling of "the caller passed something wrong" — an
// INVALID_ARGUMENT kiln::Status whose message names the argument first, then what was
// expected and what was found ("q: expected a 3-D tensor [tokens, heads, head_dim], found
// rank 2 [7, 64]"). Tests assert these messages byte for byte.
#pragma once

#include <string_view>

#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT with `what` as the whole message.
Status InvalidArgument(std::string_view what);

// INVALID_ARGUMENT "<name>: <what>": `name` is the argument (or the API and its argument).
Status InvalidArgument(std::string_view name, std::string_view what);

}  // namespace kiln::client
