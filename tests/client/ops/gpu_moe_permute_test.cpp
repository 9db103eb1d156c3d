// [gpu] moe_permute (kiln/ops/moe.h) on a real GPU and daemon, against a CPU reference that
// walks the slots in order with a cursor per expert (PermuteReference: stable by construction):
//  - tokens 0, 1, 3, 64, 1000, 4096 x experts 8, 64, 128, 256 x top_k 1, 2, 8 x align 1, 64,
//    128, on fresh random ids (top_k distinct experts per token, as moe_route writes them), with
//    the gather (bf16 or fp16, hidden sizes that pick 16-, 8- and 2-byte copies); every output
//    poisoned before each launch with guard elements after it (and padded rows of topk_ids,
//    slot_to_row, x and permuted_x) that must stay poisoned; counts, m_indptr, both maps exact,
//    the gather bit for bit, padding rows zeros, rows from m_indptr[E] on not written;
//  - ids: experts with no token, every token to one expert, ids outside [0, E) (no row,
//    slot_to_row -1, not counted), repeated ids in a token;
//  - the multi-block permutation (kPermuteMultiBlockMinSlots slots on): both sides of its
//    threshold, chunk edges inside a token, 128 chunks, ids of every kind across chunks;
//  - determinism (two launches and the C ABI give the same bits), a CUDA graph replayed on new
//    ids, T = 0, DeepSeek-V3's hidden size, an unaligned x;
//  - refused through the real path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;

constexpr uint8_t kIntPoison = 0xA5;  // int32 0xA5A5A5A5: never an index, never -1
constexpr int32_t kIntPoisonValue = static_cast<int32_t>(0xA5A5A5A5u);
constexpr uint8_t kXPoison = 0xFF;  // bf16/fp16 NaN
constexpr int64_t kGuard = 64;      // elements after each int output (rows after permuted_x)

// ---- The reference ---------------------------------------------------------------------------

struct Layout {
  std::vector<int32_t> counts;       // [E]
  std::vector<int32_t> indptr;       // [E + 1]
  std::vector<int32_t> row_to_slot;  // [rows]
  std::vector<int32_t> slot_to_row;  // [T * top_k]
};

// The rule of kiln/ops/moe.h: counts, the aligned scan, then the slots in order, each to the
// next row of its expert (so stable); ids outside [0, E) get no row.
Layout PermuteReference(const std::vector<int32_t>& ids, int64_t experts, int64_t align, int64_t rows) {
  Layout l;
  l.counts.assign(static_cast<size_t>(experts), 0);
  l.indptr.assign(static_cast<size_t>(experts + 1), 0);
  l.row_to_slot.assign(static_cast<size_t>(rows), -1);
  l.slot_to_row.assign(ids.size(), -1);
  for (int32_t e : ids)
    if (e >= 0 && e < experts) ++l.counts[static_cast<size_t>(e)];
  std::vector<int32_t> cursor(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    cursor[e] = l.indptr[e];
    l.indptr[e + 1] = l.indptr[e] + static_cast<int32_t>((l.counts[e] + align - 1) / align * align);
  }
  for (size_t s = 0; s < ids.size(); ++s) {
    const int32_t e = ids[s];
    if (e < 0 || e >= experts) continue;
    const int32_t row = cursor[static_cast<size_t>(e)]++;
    l.row_to_slot[static_cast<size_t>(row)] = static_cast<int32_t>(s);
    l.slot_to_row[s] = row;
  }
  return l;
}

// ---- Ids ------------------------------------------------------------------------------------

enum class Ids {
  kDistinct,    // top_k distinct experts per token, uniformly (a router's output)
  kFewExperts,  // distinct, from the first quarter of the experts only: most experts empty
  kOneExpert,   // every slot to expert E - 1
  kOutOfRange,  // a fifth of the slots outside [0, E): -1, E, E + 7, -E, INT_MIN, INT_MAX
  kRepeated,    // uniform with replacement: a token may name an expert twice
};

std::vector<int32_t> MakeIds(Ids kind, int64_t tokens, int64_t top_k, int64_t experts, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
  const int64_t pool_size = kind == Ids::kFewExperts ? std::max<int64_t>(top_k, experts / 4) : experts;
  std::vector<int32_t> pool(static_cast<size_t>(pool_size));
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(experts - 1));
  std::uniform_int_distribution<int> fifth(0, 4);
  const int32_t bad[] = {
      -1,     static_cast<int32_t>(experts), static_cast<int32_t>(experts + 7), static_cast<int32_t>(-experts), INT_MIN,
      INT_MAX};
  std::uniform_int_distribution<int> which_bad(0, 5);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t j = 0; j < top_k; ++j) {
      int32_t& id = ids[static_cast<size_t>(t * top_k + j)];
      switch (kind) {
        case Ids::kDistinct:
        case Ids::kFewExperts:
        case Ids::kOutOfRange: {
          std::uniform_int_distribution<int64_t> pick(j, pool_size - 1);
          std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(pick(rng))]);
          id = pool[static_cast<size_t>(j)];
          if (kind == Ids::kOutOfRange && fifth(rng) == 0) id = bad[which_bad(rng)];
          break;
        }
        case Ids::kOneExpert: id = static_cast<int32_t>(experts - 1); break;
        case Ids::kRepeated: id = any(rng); break;
      }
    }
  }
  return ids;
}

// ---- One call on the device -----------------------------------------------------------------

struct Case {
  int64_t tokens, experts, top_k, align;
  Ids ids = Ids::kDistinct;
  int64_t hidden = 0;  // 0: no gather
  DType dtype = DType::kBFloat16;
  int64_t pad = 0;         // extra elements per row of topk_ids, slot_to_row, x and permuted_x
  int64_t extra_rows = 0;  // row_to_slot and permuted_x rows beyond the bound
  int64_t x_offset = 0;    // x starts this many elements into its buffer (1: only 2-byte copies)
};

std::string Describe(const Case& c) {
  static const char* const kIdNames[] = {"distinct", "few experts", "one expert", "out of range", "repeated"};
  return "T " + std::to_string(c.tokens) + " E " + std::to_string(c.experts) + " top_k " + std::to_string(c.top_k) +
         " align " + std::to_string(c.align) + " ids " + kIdNames[static_cast<int>(c.ids)] + " hidden " +
         std::to_string(c.hidden) + " " + kiln::DTypeName(c.dtype) + " pad " + std::to_string(c.pad) + " extra rows " +
         std::to_string(c.extra_rows) + " x offset " + std::to_string(c.x_offset);
}

struct Outputs {
  std::vector<int32_t> counts, indptr, row_to_slot, slot_to_row;  // with their guards / padding
  std::vector<uint8_t> permuted_x;                                // the whole buffer
};

std::vector<int32_t> Ints(const DeviceBuffer& b) {
  const auto bytes = b.Download();
  std::vector<int32_t> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

class Permuted {
 public:
  Permuted(const Case& c, std::vector<int32_t> ids, std::mt19937& rng) : c_(c), ids_(std::move(ids)) {
    rows_ = kiln::ops::moe_permute_rows(c.tokens, c.top_k, c.experts, c.align) + c.extra_rows;
    const int64_t ids_stride = c.top_k + c.pad;
    ids_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(std::max<int64_t>(c.tokens * ids_stride, 1)) * 4);
    WriteIds();
    counts_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts + kGuard) * 4);
    indptr_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts + 1 + kGuard) * 4);
    row_to_slot_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows_ + kGuard) * 4);
    slot_to_row_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.tokens * ids_stride + kGuard) * 4);
    if (c.hidden > 0) {
      const int64_t x_stride = c.hidden + c.pad;
      x_bytes_.resize(static_cast<size_t>((c.tokens * x_stride + c.x_offset) * 2));
      std::uniform_int_distribution<int> byte(0, 255);
      for (auto& b : x_bytes_) b = static_cast<uint8_t>(byte(rng));  // any bits: the copy is bitwise
      x_ = std::make_unique<DeviceBuffer>(std::max<size_t>(x_bytes_.size(), 2));
      if (!x_bytes_.empty()) x_->Upload(x_bytes_);
      out_ = std::make_unique<DeviceBuffer>(static_cast<size_t>((rows_ + kGuard) * x_stride * 2));
    }
  }

  // New ids in the same buffer (the graph test).
  void Upload(std::vector<int32_t> ids) {
    ids_ = std::move(ids);
    WriteIds();
  }

  // ids_ into topk_ids' rows.
  void WriteIds() {
    const int64_t stride = c_.top_k + c_.pad;
    // The padding of each row holds a valid id: a kernel that read it would miscount.
    std::vector<int32_t> padded(static_cast<size_t>(std::max<int64_t>(c_.tokens * stride, 1)), 0);
    for (int64_t t = 0; t < c_.tokens; ++t)
      for (int64_t j = 0; j < stride; ++j)
        padded[t * stride + j] = j < c_.top_k ? ids_[t * c_.top_k + j] : static_cast<int32_t>(c_.experts - 1);
    ids_dev_->Upload(kiln::testing::Bytes(padded.data(), padded.size() * 4));
    // The copy and the memsets run on the legacy default stream, which a non-blocking stream
    // does not wait for.
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  }

  TensorView ids() const {
    return TensorView::Strided(ids_dev_->data(), DType::kInt32, {c_.tokens, c_.top_k}, {c_.top_k + c_.pad, 1});
  }
  TensorView counts() const { return TensorView::Contiguous(counts_->data(), DType::kInt32, {c_.experts}); }
  TensorView indptr() const { return TensorView::Contiguous(indptr_->data(), DType::kInt32, {c_.experts + 1}); }
  TensorView row_to_slot() const { return TensorView::Contiguous(row_to_slot_->data(), DType::kInt32, {rows_}); }
  TensorView slot_to_row() const {
    return TensorView::Strided(slot_to_row_->data(), DType::kInt32, {c_.tokens, c_.top_k}, {c_.top_k + c_.pad, 1});
  }
  TensorView x() const {
    return TensorView::Strided(x_->data() + c_.x_offset * 2, c_.dtype, {c_.tokens, c_.hidden}, {c_.hidden + c_.pad, 1});
  }
  TensorView permuted_x() const {
    return TensorView::Strided(out_->data(), c_.dtype, {rows_, c_.hidden}, {c_.hidden + c_.pad, 1});
  }
  bool gather() const { return c_.hidden > 0; }
  int64_t rows() const { return rows_; }
  const std::vector<int32_t>& host_ids() const { return ids_; }

  void Poison() {
    for (DeviceBuffer* b : {counts_.get(), indptr_.get(), row_to_slot_.get(), slot_to_row_.get()})
      KILN_CU(kiln::testing::Driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(b->data()), kIntPoison, b->bytes()));
    if (gather())
      KILN_CU(kiln::testing::Driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(out_->data()), kXPoison, out_->bytes()));
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());  // before a launch on a non-blocking stream
  }

  // Poisons the outputs, launches through the C++ API, and reads everything back.
  Outputs Run(void* stream = nullptr) {
    Poison();
    const TensorView c = counts(), i = indptr(), r = row_to_slot(), s = slot_to_row(), ids_v = ids();
    TensorView x_v, out_v;
    if (gather()) {
      x_v = x();
      out_v = permuted_x();
    }
    const kiln::Status status = kiln::ops::moe_permute(c, i, r, s, gather() ? &out_v : nullptr, ids_v,
                                                       gather() ? &x_v : nullptr, c_.align, stream);
    INFO(Describe(c_) << ": " << status.ToString());
    REQUIRE(status.ok());
    return Read();
  }

  // The same through kiln_moe_permute.
  Outputs RunC() {
    Poison();
    const TensorView c = counts(), i = indptr(), r = row_to_slot(), s = slot_to_row(), ids_v = ids();
    DLTensor c_dl = kiln::testing::ToDLTensor(c), i_dl = kiln::testing::ToDLTensor(i);
    DLTensor r_dl = kiln::testing::ToDLTensor(r), s_dl = kiln::testing::ToDLTensor(s);
    DLTensor ids_dl = kiln::testing::ToDLTensor(ids_v);
    TensorView x_v, out_v;
    DLTensor x_dl{}, out_dl{};
    if (gather()) {
      x_v = x();
      out_v = permuted_x();
      x_dl = kiln::testing::ToDLTensor(x_v);
      out_dl = kiln::testing::ToDLTensor(out_v);
    }
    const kiln_status status = kiln_moe_permute(&c_dl, &i_dl, &r_dl, &s_dl, gather() ? &out_dl : nullptr, &ids_dl,
                                                gather() ? &x_dl : nullptr, c_.align, nullptr);
    INFO(Describe(c_) << ": " << kiln_last_error());
    REQUIRE(status == KILN_OK);
    return Read();
  }

  Outputs Read() const {
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    Outputs o;
    o.counts = Ints(*counts_);
    o.indptr = Ints(*indptr_);
    o.row_to_slot = Ints(*row_to_slot_);
    o.slot_to_row = Ints(*slot_to_row_);
    if (gather()) o.permuted_x = out_->Download();
    return o;
  }

  // Everything against PermuteReference, guards and padding included.
  void Check(const Outputs& got) const {
    const Case& c = c_;
    const Layout want = PermuteReference(ids_, c.experts, c.align, rows_);
    std::vector<std::string> problems;
    // `what` builds the message only for a problem (most checks pass, and there are many).
    auto expect = [&](bool ok, const auto& what) {
      if (!ok && problems.size() < 8) problems.push_back(what());
    };
    auto text = [](const char* name, int64_t i, int64_t got_v, int64_t want_v) {
      return std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(got_v) + ", want " +
             std::to_string(want_v);
    };
    for (int64_t e = 0; e < c.experts; ++e)
      expect(got.counts[e] == want.counts[e], [&] { return text("expert_counts", e, got.counts[e], want.counts[e]); });
    for (int64_t e = 0; e <= c.experts; ++e) {
      expect(got.indptr[e] == want.indptr[e], [&] { return text("m_indptr", e, got.indptr[e], want.indptr[e]); });
      expect(got.indptr[e] % c.align == 0,
             [&] { return text("m_indptr (not a multiple of align)", e, got.indptr[e], 0); });
    }
    for (int64_t r = 0; r < rows_; ++r)
      expect(got.row_to_slot[r] == want.row_to_slot[r],
             [&] { return text("row_to_slot", r, got.row_to_slot[r], want.row_to_slot[r]); });
    const int64_t stride = c.top_k + c.pad;
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t j = 0; j < stride; ++j) {
        const int32_t v = got.slot_to_row[t * stride + j];
        const int32_t w = j < c.top_k ? want.slot_to_row[t * c.top_k + j] : kIntPoisonValue;
        expect(v == w, [&] {
          return text(j < c.top_k ? "slot_to_row (flat)" : "slot_to_row's row padding (flat)", t * stride + j, v, w);
        });
      }
    // Nothing written past the outputs.
    for (int64_t g = 0; g < kGuard; ++g) {
      expect(got.counts[c.experts + g] == kIntPoisonValue, [] { return std::string("expert_counts' guard written"); });
      expect(got.indptr[c.experts + 1 + g] == kIntPoisonValue, [] { return std::string("m_indptr's guard written"); });
      expect(got.row_to_slot[rows_ + g] == kIntPoisonValue, [] { return std::string("row_to_slot's guard written"); });
      expect(got.slot_to_row[c.tokens * stride + g] == kIntPoisonValue,
             [] { return std::string("slot_to_row's guard written"); });
    }
    if (gather()) {
      const int64_t row_bytes = c.hidden * 2, stride_bytes = (c.hidden + c.pad) * 2;
      const int64_t used = want.indptr[c.experts];
      std::vector<uint8_t> zeros(static_cast<size_t>(row_bytes), 0);
      for (int64_t r = 0; r < rows_ + kGuard; ++r) {
        const uint8_t* row = got.permuted_x.data() + r * stride_bytes;
        auto where = [r] { return "permuted_x row " + std::to_string(r); };
        if (r < used) {
          const int32_t slot = want.row_to_slot[r];
          const uint8_t* src = slot >= 0 ? x_bytes_.data() + (c.x_offset + (slot / c.top_k) * (c.hidden + c.pad)) * 2
                                         : zeros.data();
          expect(std::memcmp(row, src, static_cast<size_t>(row_bytes)) == 0, [&] {
            return where() + (slot >= 0 ? ": not x's row " + std::to_string(slot / c.top_k) + " bit for bit"
                                        : std::string(": a padding row, not zeros"));
          });
          bool untouched = true;
          for (int64_t b = row_bytes; b < stride_bytes; ++b) untouched = untouched && row[b] == kXPoison;
          expect(untouched, [&] { return where() + ": its padding columns written"; });
        } else {
          bool untouched = true;
          for (int64_t b = 0; b < stride_bytes; ++b) untouched = untouched && row[b] == kXPoison;
          expect(untouched,
                 [&] { return where() + ": at or past m_indptr[E] = " + std::to_string(used) + ", written"; });
        }
      }
    }
    std::string joined;
    for (const auto& p : problems) joined += "\n  " + p;
    INFO(Describe(c) << joined);
    CHECK(problems.empty());
  }

 private:
  Case c_;
  std::vector<int32_t> ids_;
  int64_t rows_ = 0;
  std::vector<uint8_t> x_bytes_;
  std::unique_ptr<DeviceBuffer> ids_dev_, counts_, indptr_, row_to_slot_, slot_to_row_, x_, out_;
};

bool SameBits(const Outputs& a, const Outputs& b) {
  return a.counts == b.counts && a.indptr == b.indptr && a.row_to_slot == b.row_to_slot &&
         a.slot_to_row == b.slot_to_row && a.permuted_x == b.permuted_x;
}

TEST_CASE("moe_permute matches the reference over tokens experts top_k and align with the gather",
          "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(20261203);
  const int64_t hiddens[] = {64, 7, 96, 256};  // copy units 16, 2, 16 and 16 bytes (2 with row padding 3)
  size_t n = 0;
  for (int64_t tokens : {0, 1, 3, 64, 1000, 4096}) {
    for (int64_t experts : {8, 64, 128, 256}) {
      for (int64_t top_k : {1, 2, 8}) {
        for (int64_t align : {1, 64, 128}) {
          Case c{tokens, experts, top_k, align};
          c.hidden = hiddens[n % 4];
          c.dtype = n % 2 == 0 ? DType::kBFloat16 : DType::kFloat16;
          c.pad = n % 3 == 1 ? 3 : 0;
          c.extra_rows = n % 5 == 2 ? 17 : 0;
          ++n;
          Permuted permuted(c, MakeIds(Ids::kDistinct, tokens, top_k, experts, rng), rng);
          permuted.Check(permuted.Run());
        }
      }
    }
  }
}

TEST_CASE("moe_permute handles empty experts and one expert and out-of-range and repeated ids",
          "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(16);
  for (Ids kind : {Ids::kFewExperts, Ids::kOneExpert, Ids::kOutOfRange, Ids::kRepeated}) {
    for (int64_t tokens : {1, 3, 64, 1000, 4096}) {
      for (int64_t experts : {8, 256}) {
        for (int64_t align : {1, 128}) {
          const int64_t top_k = experts == 8 ? 2 : 8;
          Case c{tokens, experts, top_k, align, kind};
          c.hidden = 128;
          c.pad = tokens % 2 == 1 ? 1 : 0;
          Permuted permuted(c, MakeIds(kind, tokens, top_k, experts, rng), rng);
          permuted.Check(permuted.Run());
        }
      }
    }
  }
  // E = 1 and E = 33 (a size class not full), every slot out of range, top_k 16.
  for (const Case& c : {Case{100, 1, 1, 1, Ids::kRepeated, 64}, Case{777, 33, 16, 8, Ids::kRepeated, 64},
                        Case{50, 200, 16, 256, Ids::kDistinct, 32}}) {
    Permuted permuted(c, MakeIds(c.ids, c.tokens, c.top_k, c.experts, rng), rng);
    permuted.Check(permuted.Run());
  }
  Case none{300, 64, 4, 64};
  none.hidden = 64;
  std::vector<int32_t> bad(300 * 4);
  for (size_t i = 0; i < bad.size(); ++i) bad[i] = i % 2 == 0 ? -1 : 64 + static_cast<int32_t>(i);
  Permuted all_bad(none, bad, rng);
  const Outputs got = all_bad.Run();
  all_bad.Check(got);
  CHECK(got.indptr[64] == 0);
}

TEST_CASE("moe_permute's multi-block permutation at its threshold, chunk edges and many chunks",
          "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(2049);
  constexpr int64_t kMin = kiln::moe::kPermuteMultiBlockMinSlots;
  static_assert(kMin - 1 == 2 * kiln::moe::kPermuteChunk, "the cases below straddle the threshold");
  REQUIRE_FALSE(kiln::moe::MoePermuteMultiBlock(kMin - 1));
  REQUIRE(kiln::moe::MoePermuteMultiBlock(kMin));
  // Single block just below, multi-block from the threshold (a last chunk of one slot), a chunk
  // ending inside a token's choices (683 * 3 = 2049), every id to one expert and out of range
  // across chunks, many chunks (16k tokens: 128 chunks, each block summing them all), with
  // padded rows of topk_ids/slot_to_row and a longer row_to_slot than needed.
  for (const Case& c :
       {Case{kMin - 1, 64, 1, 1, Ids::kDistinct, 64}, Case{kMin, 64, 1, 1, Ids::kDistinct, 64},
        Case{683, 256, 3, 128, Ids::kDistinct, 96, DType::kFloat16, 1}, Case{3000, 8, 2, 64, Ids::kOneExpert, 64},
        Case{3000, 256, 8, 1, Ids::kOutOfRange, 64, DType::kBFloat16, 2, 9}, Case{3000, 33, 4, 16, Ids::kRepeated, 0},
        Case{5000, 256, 8, 1, Ids::kFewExperts, 0},
        Case{16384, 256, 8, 128, Ids::kDistinct, 0, DType::kBFloat16, 0, 100},
        Case{16384, 32, 8, 1, Ids::kDistinct, 0}}) {
    INFO(Describe(c));
    Permuted permuted(c, MakeIds(c.ids, c.tokens, c.top_k, c.experts, rng), rng);
    permuted.Check(permuted.Run());
  }
}

TEST_CASE("moe_permute with no tokens writes empty groups and -1 rows", "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(0);
  for (int64_t align : {1, 64}) {
    Case c{0, 256, 8, align};
    c.hidden = 64;
    c.extra_rows = 5;
    Permuted permuted(c, {}, rng);
    const Outputs got = permuted.Run();
    permuted.Check(got);
    for (int64_t e = 0; e <= 256; ++e) CHECK(got.indptr[e] == 0);
    for (int64_t r = 0; r < permuted.rows(); ++r) CHECK(got.row_to_slot[r] == -1);
  }
}

TEST_CASE("moe_permute gathers DeepSeek-V3 and Qwen3 hidden sizes and unaligned rows",
          "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(7168);
  for (const Case& c : {Case{64, 256, 8, 1, Ids::kDistinct, 7168, DType::kBFloat16},
                        Case{1000, 256, 8, 128, Ids::kDistinct, 7168, DType::kBFloat16},
                        Case{333, 128, 8, 64, Ids::kDistinct, 2048, DType::kFloat16, 8},
                        Case{200, 64, 6, 1, Ids::kDistinct, 2048, DType::kBFloat16, 0, 3, 1},     // 2-byte copies
                        Case{200, 64, 6, 64, Ids::kDistinct, 1028, DType::kFloat16, 2, 0, 2}}) {  // 4-byte copies
    Permuted permuted(c, MakeIds(c.ids, c.tokens, c.top_k, c.experts, rng), rng);
    permuted.Check(permuted.Run());
  }
}

TEST_CASE("moe_permute is deterministic and the C ABI gives the same bits", "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(3);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const Case& c : {Case{4096, 256, 8, 128, Ids::kDistinct, 256}, Case{1000, 8, 2, 1, Ids::kOneExpert, 64},
                        Case{64, 128, 8, 64, Ids::kOutOfRange, 64, DType::kFloat16, 2}}) {
    Permuted permuted(c, MakeIds(c.ids, c.tokens, c.top_k, c.experts, rng), rng);
    const Outputs a = permuted.Run();
    permuted.Check(a);
    const Outputs b = permuted.Run(stream);
    const Outputs from_c = permuted.RunC();
    INFO(Describe(c));
    CHECK(SameBits(a, b));
    CHECK(SameBits(a, from_c));
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("moe_permute replays in a CUDA graph on new ids", "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(11);
  Case c{512, 128, 8, 64};
  c.hidden = 256;
  Permuted permuted(c, MakeIds(Ids::kDistinct, c.tokens, c.top_k, c.experts, rng), rng);
  permuted.Check(permuted.Run());  // loads the module outside the capture
  const TensorView counts = permuted.counts(), indptr = permuted.indptr(), r2s = permuted.row_to_slot();
  const TensorView s2r = permuted.slot_to_row(), ids = permuted.ids(), x = permuted.x(), out = permuted.permuted_x();
  const kiln::testing::CapturedCall graph([&](CUstream stream) {
    return kiln::ops::moe_permute(counts, indptr, r2s, s2r, &out, ids, &x, c.align, stream);
  });
  INFO(graph.status().ToString());
  REQUIRE(graph.status().ok());
  for (Ids kind : {Ids::kFewExperts, Ids::kOneExpert, Ids::kOutOfRange}) {
    permuted.Upload(MakeIds(kind, c.tokens, c.top_k, c.experts, rng));
    permuted.Poison();
    graph.Replay();
    permuted.Check(permuted.Read());
  }
}

TEST_CASE("moe_permute refuses what it cannot permute through the real path", "[gpu][client][ops][moe][permute]") {
  kiln::testing::GpuSession session;
  DeviceBuffer ids(7 * 8 * 4), counts(257 * 4), indptr(258 * 4), rows(600 * 4), slots(7 * 8 * 4);
  auto require_invalid = [](const kiln::Status& status, const std::string& fragment) {
    INFO(status.ToString());
    REQUIRE(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find(fragment) != std::string::npos);
  };
  auto v = [](DeviceBuffer& b, int64_t n, DType d = DType::kInt32) { return TensorView::Contiguous(b.data(), d, {n}); };
  auto m = [](DeviceBuffer& b, int64_t r, int64_t k, DType d = DType::kInt32) {
    return TensorView::Contiguous(b.data(), d, {r, k});
  };
  require_invalid(kiln::ops::moe_permute(v(counts, 8), v(indptr, 9), v(rows, 14), m(slots, 7, 2), nullptr, m(ids, 7, 2),
                                         nullptr, 3),
                  "align: expected a power of two from 1 (no padding) to 256, found 3");
  require_invalid(kiln::ops::moe_permute(v(counts, 8), v(indptr, 9), v(rows, 13), m(slots, 7, 2), nullptr, m(ids, 7, 2),
                                         nullptr, 1),
                  "row_to_slot: expected at least 14 rows");
  require_invalid(kiln::ops::moe_permute(v(counts, 257), v(indptr, 258), v(rows, 14), m(slots, 7, 2), nullptr,
                                         m(ids, 7, 2), nullptr, 1),
                  "expert_counts: the number of experts (dim 0) must be 1 to 256, found 257");
  require_invalid(kiln::ops::moe_permute(v(counts, 8), v(indptr, 9), v(rows, 14), m(slots, 7, 2), nullptr,
                                         m(ids, 7, 2, DType::kInt64), nullptr, 1),
                  "topk_ids: expected dtype int32, found int64");
  require_invalid(kiln::ops::moe_permute(v(counts, 8), v(indptr, 8), v(rows, 14), m(slots, 7, 2), nullptr, m(ids, 7, 2),
                                         nullptr, 1),
                  "m_indptr: expected shape [9]");
}

}  // namespace
