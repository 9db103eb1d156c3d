// CRC-32C (proto/crc32c.h): the published check value, and the hardware path equal to the table
// form on random data of every length around the 8-byte steps.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "proto/crc32c.h"

TEST_CASE("CRC-32C gives the published check values", "[proto][crc32c]") {
  CHECK(kiln::proto::Crc32c("123456789") == 0xE3069283u);  // RFC 3720's check value
  CHECK(kiln::proto::Crc32cPortable("123456789") == 0xE3069283u);
  CHECK(kiln::proto::Crc32c("") == 0u);
  CHECK(kiln::proto::Crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720 B.4: 32 zero bytes
}

TEST_CASE("CRC-32C's fast path equals the table form on random data", "[proto][crc32c]") {
  std::mt19937 rng(7);
  // Around the hardware path's block of three 4 KiB stripes (joined by multiplication modulo the
  // polynomial) and over several blocks, with tails of every length class.
  for (size_t n : {1, 7, 8, 9, 15, 16, 17, 63, 1000, 4096, 12287, 12288, 12289, 12295, 24576, 36877, 98168, 100003}) {
    std::string bytes(n, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    INFO("length " << n);
    CHECK(kiln::proto::Crc32c(bytes) == kiln::proto::Crc32cPortable(bytes));
    // One flipped bit changes it.
    std::string flipped = bytes;
    flipped[n / 2] ^= 0x01;
    CHECK(kiln::proto::Crc32c(flipped) != kiln::proto::Crc32c(bytes));
  }
}
