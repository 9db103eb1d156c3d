// CRC-32C (Castagnoli), the fast integrity check of a cubin handed over on the same node.
// SHA-256 stays the content address (cache keys, the index, every tier, remote clients): the
// daemon checks a blob's SHA-256 when it reads it into memory and stamps the reply with the
// CRC-32C of those verified bytes, so a client on the same node checks the bytes it read (the
// blob file, or the reply) with a checksum that costs ~5 µs per 100 KB instead of ~70 µs
// (docs/architecture.md, "The same-node fetch"). Hardware instructions where the CPU has them
// (x86 SSE4.2, arm64 CRC), a table otherwise; both give the same value.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln::proto {

uint32_t Crc32c(std::string_view bytes);
// The portable table form, for tests comparing it with the hardware path.
uint32_t Crc32cPortable(std::string_view bytes);

}  // namespace kiln::proto
