#include "proto/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

namespace kiln::proto {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli, reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t TableUpdate(uint32_t crc, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// One stream of 8-byte steps: about 8 GB/s (100 KB in ~12 µs), far below what loading the cubin
// costs. Interleaved streams would hide the instruction's latency but need a combine step.
__attribute__((target("sse4.2"))) uint32_t HardwareUpdate(uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool HaveHardware() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
uint32_t HardwareUpdate(uint32_t crc, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = __crc32cd(crc, word);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = __crc32cb(crc, *p++);
  return crc;
}
bool HaveHardware() { return true; }
#else
uint32_t HardwareUpdate(uint32_t crc, const unsigned char* p, size_t n) { return TableUpdate(crc, p, n); }
bool HaveHardware() { return false; }
#endif

}  // namespace

uint32_t Crc32cPortable(std::string_view bytes) {
  return ~TableUpdate(~0u, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

uint32_t Crc32c(std::string_view bytes) {
  if (!HaveHardware()) return Crc32cPortable(bytes);
  return ~HardwareUpdate(~0u, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace kiln::proto
