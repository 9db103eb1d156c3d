// kiln_base/status_macros.h: the error comes back unchanged (code, message, payload), the
// value is moved out, `expr` runs once, and the macros compose in one scope.
#include "kiln_base/status_macros.h"

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/cord.h"

namespace {

absl::Status FailWithPayload() {
  absl::Status s = absl::NotFoundError("no entry for key abc");
  s.SetPayload("kiln/test", absl::Cord("log text"));
  return s;
}

absl::StatusOr<std::string> Text(bool ok, int* calls) {
  ++*calls;
  if (!ok) return absl::InvalidArgumentError("bad text");
  return std::string("hello");
}

absl::StatusOr<std::unique_ptr<int>> Owned(int value) { return std::make_unique<int>(value); }

absl::Status Propagate(absl::Status status, int* reached) {
  KILN_ABSL_RETURN_IF_ERROR(status);
  ++*reached;
  return absl::OkStatus();
}

// A function of another value type than the callee's: the status converts, unchanged.
absl::StatusOr<size_t> LengthOf(bool ok, int* calls) {
  KILN_ABSL_ASSIGN_OR_RETURN(auto text, Text(ok, calls));
  return text.size();
}

}  // namespace

TEST_CASE("KILN_ABSL_RETURN_IF_ERROR returns a failure unchanged and goes on after OK", "[status_macros]") {
  int reached = 0;
  CHECK(Propagate(absl::OkStatus(), &reached).ok());
  CHECK(reached == 1);

  absl::Status failed = Propagate(FailWithPayload(), &reached);
  CHECK(reached == 1);
  CHECK(failed == FailWithPayload());
  REQUIRE(failed.GetPayload("kiln/test").has_value());
  CHECK(std::string(*failed.GetPayload("kiln/test")) == "log text");

  // Into a StatusOr, and with `expr` evaluated once.
  int calls = 0;
  auto twice = [&]() -> absl::StatusOr<int> {
    KILN_ABSL_RETURN_IF_ERROR(Text(false, &calls).status());
    return 7;
  };
  absl::StatusOr<int> r = twice();
  CHECK(calls == 1);
  CHECK(r.status() == absl::InvalidArgumentError("bad text"));
}

TEST_CASE("KILN_ABSL_ASSIGN_OR_RETURN moves the value out or returns the status", "[status_macros]") {
  int calls = 0;
  absl::StatusOr<size_t> length = LengthOf(true, &calls);
  REQUIRE(length.ok());
  CHECK(*length == 5);
  CHECK(calls == 1);

  absl::StatusOr<size_t> failed = LengthOf(false, &calls);
  CHECK(calls == 2);
  CHECK(failed.status() == absl::InvalidArgumentError("bad text"));
}

TEST_CASE("KILN_ABSL_ASSIGN_OR_RETURN takes declarations, references, existing variables and move-only values",
          "[status_macros]") {
  auto body = []() -> absl::Status {
    int calls = 0;
    auto text = [&] { return Text(true, &calls); };
    // Two in one scope (and on one line): each has its own hidden local.
    KILN_ABSL_ASSIGN_OR_RETURN(std::string a, text());
    KILN_ABSL_ASSIGN_OR_RETURN(std::string b, text());
    CHECK(a + b == "hellohello");

    KILN_ABSL_ASSIGN_OR_RETURN(const std::string& ref, Text(true, &calls));
    CHECK(ref == "hello");  // still valid: the hidden local lives to the end of this scope

    std::string existing = "before";
    KILN_ABSL_ASSIGN_OR_RETURN(existing, Text(true, &calls));
    CHECK(existing == "hello");

    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<int> owned, Owned(42));
    REQUIRE(owned != nullptr);
    CHECK(*owned == 42);

    std::vector<std::unique_ptr<int>> list;
    KILN_ABSL_ASSIGN_OR_RETURN(list.emplace_back(), Owned(3));
    CHECK(*list.front() == 3);
    CHECK(calls == 4);
    return absl::OkStatus();
  };
  CHECK(body().ok());
}
