// PreparedMemo: distinct requests never share a fingerprint; a preparation is reused only for
// the kernels-tree generation it was made from; the memo stays within its byte budget.
#include <catch2/catch.hpp>

#include "server/engine/kernel_engine.h"
#include "server/engine/prepared_memo.h"

using namespace kiln::server;

namespace {
KernelQuery Op(std::map<std::string, std::string> params, std::string arch = "sm_90a") {
  KernelQuery q;
  q.op = "rmsnorm";
  q.params = kiln::kernels::Params(params.begin(), params.end());
  q.target_arch = std::move(arch);
  return q;
}

std::shared_ptr<const PreparedRequest> Prepared(uint64_t generation, size_t source_bytes = 10) {
  auto tree = std::make_shared<kiln::kernels::TreeSnapshot>();
  tree->generation = generation;
  auto p = std::make_shared<PreparedRequest>();
  p->tree = tree;
  p->spec.units.push_back({"u.cu", std::string(source_bytes, 'x'), kiln::kernels::SourceFile::Origin::kRequest, ""});
  return p;
}
}  // namespace

TEST_CASE("request fingerprints differ whenever the requests differ", "[memo]") {
  std::set<std::string> seen;
  auto add = [&](const KernelQuery& q) { CHECK(seen.insert(PreparedMemo::Fingerprint(q)).second); };
  add(Op({{"a", "bc"}}));
  add(Op({{"ab", "c"}}));
  add(Op({{"a", "bc"}}, "sm_80"));
  KernelQuery debug = Op({{"a", "bc"}});
  debug.lineinfo = true;
  add(debug);
  KernelQuery source;
  source.is_source = true;
  source.source.name = "k";
  source.source.code = "ab";
  source.source.entries = {"c"};
  source.target_arch = "sm_90a";
  add(source);
  source.source.code = "a";
  source.source.entries = {"bc"};
  add(source);
  source.source.options = {"-DX"};
  add(source);
  CHECK(PreparedMemo::Fingerprint(Op({{"a", "bc"}})) == PreparedMemo::Fingerprint(Op({{"a", "bc"}})));
}

TEST_CASE("a memoized preparation is dropped once the kernels tree changes", "[memo]") {
  PreparedMemo memo;
  memo.Put("f", Prepared(7));
  CHECK(memo.Get("f", 7) != nullptr);
  CHECK(memo.Get("f", 8) == nullptr);
  CHECK(memo.Get("f", 7) == nullptr);  // gone, not merely hidden
  CHECK(memo.Get("other", 7) == nullptr);
}

TEST_CASE("the memo keeps to its byte budget, least recently used first", "[memo]") {
  PreparedMemo memo(64 * 1024);
  for (int i = 0; i < 20; ++i) memo.Put("f" + std::to_string(i), Prepared(1, 4000));
  int kept = 0;
  for (int i = 0; i < 20; ++i) kept += memo.Get("f" + std::to_string(i), 1) != nullptr;
  CHECK(kept < 20);
  CHECK(kept >= 5);
  CHECK(memo.Get("f19", 1) != nullptr);
  memo.Put("huge", Prepared(1, 60 * 1024));  // larger than a quarter of the budget: not kept
  CHECK(memo.Get("huge", 1) == nullptr);
}
