// Spec lists (proto/spec_list.h): the lines kiln warm, kilnd --warm and kiln aot build read, and
// kiln cache export-list writes.
#include "proto/spec_list.h"

#include <catch2/catch.hpp>

using kiln::proto::ExpandSpecTargets;
using kiln::proto::FormatSpecLine;
using kiln::proto::ParseSpecList;

TEST_CASE("a spec list: ops with params and @ARCH targets, comments and blank lines", "[spec_list]") {
  auto list = ParseSpecList(
      "# warm-up for llama\n"
      "\n"
      "rmsnorm dtype=bf16 hidden=4096\n"
      "  batch_decode dtype=bf16 head_dim=128 group=4 page_size=16 @sm_90a @sm_80   # 1523 hits\r\n"
      "rmsnorm hidden=4096 dtype=bf16 @sm_90a\n"  // the first line again: archs merge
      "silu_and_mul\tdtype=fp16",
      "llama.list");
  REQUIRE(list.error.empty());
  REQUIRE(list.entries.size() == 3);
  CHECK(list.entries[0].op == "rmsnorm");
  CHECK(list.entries[0].params == std::map<std::string, std::string>{{"dtype", "bf16"}, {"hidden", "4096"}});
  CHECK(list.entries[0].archs == std::vector<std::string>{"sm_90a"});
  CHECK(list.entries[0].source == "llama.list:3");
  CHECK(list.entries[1].op == "batch_decode");
  CHECK(list.entries[1].params.size() == 4);
  CHECK(list.entries[1].archs == std::vector<std::string>{"sm_90a", "sm_80"});
  CHECK(list.entries[2].op == "silu_and_mul");
  CHECK(list.entries[2].archs.empty());

  CHECK(FormatSpecLine(list.entries[1], "1523 hits") ==
        "batch_decode dtype=bf16 group=4 head_dim=128 page_size=16 @sm_90a @sm_80  # 1523 hits");
  // What FormatSpecLine writes reads back the same.
  auto again = ParseSpecList(FormatSpecLine(list.entries[1], "x") + "\n", "again");
  REQUIRE(again.entries.size() == 1);
  CHECK(again.entries[0].params == list.entries[1].params);
  CHECK(again.entries[0].archs == list.entries[1].archs);
}

TEST_CASE("a bad spec list line is refused naming the file, the line and what is wrong", "[spec_list]") {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"rms-norm dtype=bf16", "the op 'rms-norm' is not a name"},
        Case{"rmsnorm dtype", "'dtype' is not KEY=VALUE"}, Case{"rmsnorm dtype=", "the param dtype has no value"},
        Case{"rmsnorm dtype=bf16 dtype=fp16", "the param dtype is given twice"},
        Case{"rmsnorm dtype=bf16 @hopper", "'@hopper' is not an arch target"},
        Case{"rmsnorm @sm_90a dtype=bf16", "comes after an @ARCH target"},
        Case{"rmsnorm d-type=bf16", "the param name 'd-type' is not a name"}}) {
    auto list = ParseSpecList(std::string("# ok\nrmsnorm dtype=bf16\n") + c.text + "\n", "x.list");
    INFO(c.text);
    CHECK(list.entries.empty());
    CHECK_THAT(list.error, Catch::StartsWith("x.list:3: '"));
    CHECK_THAT(list.error, Catch::Contains(c.says));
    CHECK_THAT(list.error, Catch::EndsWith("expected 'OP KEY=VALUE... [@ARCH...]'"));
  }
  auto unreadable = kiln::proto::ReadSpecList("/nonexistent/kiln.list");
  CHECK_THAT(unreadable.error, Catch::Contains("cannot read the spec list /nonexistent/kiln.list"));
}

TEST_CASE("targets: --arch replaces every line's archs and a line left without one is an error", "[spec_list]") {
  auto list = ParseSpecList("a x=1 @sm_80\nb y=2 @sm_90a @sm_80\n", "t.list");
  REQUIRE(list.error.empty());
  auto own = ExpandSpecTargets(list.entries, {}, "--arch");
  REQUIRE(own.error.empty());
  REQUIRE(own.targets.size() == 3);
  CHECK(own.targets[0].arch == "sm_80");
  CHECK(own.targets[1].entry->op == "b");
  CHECK(own.targets[1].arch == "sm_90a");
  CHECK(own.targets[1].Request().name() == "b");
  CHECK(own.targets[1].Request().params().at("y") == "2");
  auto replaced = ExpandSpecTargets(list.entries, {"sm_100a"}, "--arch");
  REQUIRE(replaced.targets.size() == 2);
  CHECK(replaced.targets[1].arch == "sm_100a");

  auto bare = ParseSpecList("a x=1 @sm_80\nb y=2\n", "t.list");
  auto missing = ExpandSpecTargets(bare.entries, {}, "--arch");
  CHECK(missing.targets.empty());
  CHECK_THAT(missing.error, Catch::StartsWith("t.list:2: b names no @ARCH target and no --arch was given"));
}
