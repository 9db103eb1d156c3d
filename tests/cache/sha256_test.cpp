// Tests of cache/sha256.h against the FIPS 180-2 vectors.
#include "cache/sha256.h"

#include <catch2/catch.hpp>

namespace kiln::cache {
namespace {

TEST_CASE("Sha256Hex matches the standard test vectors", "[sha256]") {
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("incremental Sha256 equals the one-shot hash, including binary bytes", "[sha256]") {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 31));
  Sha256 hasher;
  hasher.Update(std::string_view(data).substr(0, 7));
  hasher.Update("");
  hasher.Update(std::string_view(data).substr(7));
  CHECK(hasher.FinalHex() == Sha256Hex(data));
}

TEST_CASE("IsSha256Hex accepts exactly 64 lowercase hex digits", "[sha256]") {
  CHECK(IsSha256Hex(Sha256Hex("x")));
  CHECK_FALSE(IsSha256Hex(""));
  CHECK_FALSE(IsSha256Hex(Sha256Hex("x").substr(1)));
  CHECK_FALSE(IsSha256Hex(Sha256Hex("x") + "0"));
  std::string upper = Sha256Hex("x");
  for (auto& c : upper) c = static_cast<char>(std::toupper(c));
  CHECK_FALSE(IsSha256Hex(upper));
  CHECK_FALSE(IsSha256Hex(std::string(63, 'a') + "g"));
  CHECK_FALSE(IsSha256Hex("../../" + std::string(58, 'a')));
}

TEST_CASE("LowerHex spells every byte as two lowercase digits, and IsLowerHex accepts that spelling", "[sha256]") {
  CHECK(LowerHex("") == "");
  CHECK(LowerHex(std::string_view("\x00\x0f\xa0\xff", 4)) == "000fa0ff");
  CHECK(LowerHex("abc") == "616263");
  CHECK(IsLowerHex("0123456789abcdef"));
  CHECK(IsLowerHex(Sha256Hex("x").substr(0, 8)));  // a key prefix
  CHECK_FALSE(IsLowerHex(""));
  CHECK_FALSE(IsLowerHex("ABCDEF01"));
  CHECK_FALSE(IsLowerHex("0123456g"));
  CHECK_FALSE(IsLowerHex("01234 67"));
}

}  // namespace
}  // namespace kiln::cache
