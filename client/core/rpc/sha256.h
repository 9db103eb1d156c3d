// SHA-256 of a cubin as lowercase hex (OpenSSL), to check what the daemon sent before loading.
#pragma once

#include <string>
#include <string_view>

namespace kiln::client {

std::string Sha256Hex(std::string_view bytes);

}  // namespace kiln::client
