// How messages quote what a client sent (proto/input_limits.h): short inputs whole, long ones
// cut with the count of the rest, control characters escaped; the tuning checks quote the same
// way, so a huge field never becomes a huge message.
#include <catch2/catch.hpp>

#include <string>

#include "proto/input_limits.h"
#include "proto/tuning_checks.h"

using namespace kiln::proto;

TEST_CASE("a short input is quoted whole and a long one is cut saying how much is left out", "[input_limits]") {
  CHECK(QuoteInput("rmsnorm") == "'rmsnorm'");
  CHECK(QuoteInput("a\nb\x01") == "'a\\x0ab\\x01'");
  const std::string huge(1 << 20, 'x');
  const std::string quoted = QuoteInput(huge);
  CHECK(quoted == "'" + std::string(kMaxQuotedBytes, 'x') + "'... (" + std::to_string(huge.size() - kMaxQuotedBytes) +
                      " more bytes)");
}

TEST_CASE("a value past its limit is named with its length and the limit", "[input_limits]") {
  CHECK(LengthProblem("op.name", "rmsnorm", kMaxOpNameBytes).empty());
  CHECK(LengthProblem("op.name", std::string(kMaxOpNameBytes, 'a'), kMaxOpNameBytes).empty());
  const std::string p = LengthProblem("op.name", std::string(1 << 20, 'a'), kMaxOpNameBytes);
  CHECK_THAT(p, Catch::StartsWith("op.name is 1048576 bytes long (it starts 'aaaa"));
  CHECK_THAT(p, Catch::EndsWith("; at most 64 bytes"));
  CHECK(p.size() < 256);
  CHECK(CountProblem("op.params", 3, kMaxParams).empty());
  CHECK(CountProblem("op.params", 65, kMaxParams) == "op.params has 65 items; at most 64");
}

TEST_CASE("the tuning checks quote a huge field in a short message", "[input_limits]") {
  const std::string p = OpNameProblem("op", std::string(1 << 20, 'g'));
  CHECK_THAT(p, Catch::Contains("is 1048576 characters long (at most 64)"));
  CHECK(p.size() < 512);
  CHECK(BucketProblem("bucket", std::string(100000, 'b')).size() < 512);
}
