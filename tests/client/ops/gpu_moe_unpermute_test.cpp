// [gpu] moe_unpermute (kiln/ops/moe.h), the combine, on a real GPU and daemon, against a float64
// CPU reference (CombineReference) on fresh random data, and bit for bit against the fp32 sum
// the contract states (fused multiply-adds in the order of j, rounded once: FmaChain):
//  - tokens 1, 3, 64, 1000, 4096 x top_k 1, 2, 8 (and 16), bf16 and fp16, hidden sizes and
//    paddings that pick every unit (8, 136 and 4096 at 16 bytes; 136 with padded out rows and
//    2050 at 4; 2049 or an expert_out one element off at 2; an out 8 bytes off at 8);
//  - slot_to_row with -1 and other negative entries and entries at or past R (R itself, R + 3:
//    rows of NaN after expert_out's end that must never be read; INT_MAX, which would fault),
//    and a token whose choices are all invalid (zeros);
//  - out poisoned before every launch: its row padding and a guard row after it stay poisoned;
//  - the C ABI, a second stream and a second launch give the same bits; a CUDA graph replayed on
//    new data; T = 0 writes nothing;
//  - route -> permute (with the gather) -> identity experts (expert_out = permuted_x) -> unpermute
//    gives x * (the sum of each token's valid weights);
//  - refused through the real path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/ops/moe.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::HostTensor;

constexpr uint8_t kPoison = 0xFF;  // bf16/fp16 NaN
constexpr int64_t kTrapRows = 8;   // rows of NaN after expert_out's R rows: never to be read

// ---- The references ---------------------------------------------------------------------------

// out[t, h] = sum over valid j of w[t, j] * e[row, h], in float64. `e` holds expert_out's rows
// `stride` elements apart; `rows` is R (an index outside [0, R) is no row).
std::vector<double> CombineReference(const HostTensor& e, int64_t e_offset, int64_t stride, int64_t rows,
                                     const std::vector<int32_t>& slot_to_row, const std::vector<float>& weights,
                                     int64_t tokens, int64_t top_k, int64_t hidden) {
  std::vector<double> out(static_cast<size_t>(tokens * hidden), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t r = slot_to_row[t * top_k + j];
      if (r < 0 || r >= rows) continue;
      const double w = weights[t * top_k + j];
      for (int64_t h = 0; h < hidden; ++h)
        out[t * hidden + h] += w * e.Get(static_cast<size_t>(e_offset + r * stride + h));
    }
  return out;
}

// The contract's own arithmetic: fp32, fmaf in the order of j, rounded once to the dtype (the
// rounding of HostTensor::Set is the kernels' FromFloat). Returns the output's bits, [T, H].
HostTensor FmaChain(const HostTensor& e, int64_t e_offset, int64_t stride, int64_t rows,
                    const std::vector<int32_t>& slot_to_row, const std::vector<float>& weights, int64_t tokens,
                    int64_t top_k, int64_t hidden) {
  HostTensor out = kiln::testing::MakeHostTensor(e.dtype, static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h) {
      float acc = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t r = slot_to_row[t * top_k + j];
        if (r < 0 || r >= rows) continue;
        acc = std::fmaf(weights[t * top_k + j], e.Get(static_cast<size_t>(e_offset + r * stride + h)), acc);
      }
      out.Set(static_cast<size_t>(t * hidden + h), acc);
    }
  return out;
}

// ---- One call on the device -----------------------------------------------------------------

struct Case {
  int64_t tokens, top_k, hidden;
  DType dtype = DType::kBFloat16;
  int64_t out_pad = 0;        // extra elements per row of out
  int64_t expert_pad = 0;     // extra elements per row of expert_out
  int64_t index_pad = 0;      // extra elements per row of slot_to_row and topk_weights
  int64_t expert_offset = 0;  // expert_out starts this many elements into its buffer
  int64_t out_offset = 0;     // out likewise
  bool invalid = true;        // -1 and out-of-range entries, one token without any valid choice
};

std::string Describe(const Case& c) {
  return "T " + std::to_string(c.tokens) + " top_k " + std::to_string(c.top_k) + " hidden " + std::to_string(c.hidden) +
         " " + kiln::DTypeName(c.dtype) + " pads " + std::to_string(c.out_pad) + "/" + std::to_string(c.expert_pad) +
         "/" + std::to_string(c.index_pad) + " offsets " + std::to_string(c.expert_offset) + "/" +
         std::to_string(c.out_offset) + (c.invalid ? " with invalid rows" : "");
}

class Combine {
 public:
  Combine(const Case& c, std::mt19937& rng) : c_(c) {
    rows_ = c.tokens * c.top_k;
    const int64_t index_stride = c.top_k + c.index_pad;
    expert_dev_ = std::make_unique<DeviceBuffer>(
        static_cast<size_t>(std::max<int64_t>(c.expert_offset + (rows_ + kTrapRows) * ExpertStride(), 1)) * 2);
    slot_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(std::max<int64_t>(c.tokens * index_stride, 1)) * 4);
    weights_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(std::max<int64_t>(c.tokens * index_stride, 1)) *
                                                  4);
    out_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.out_offset + (c.tokens + 1) * OutStride()) *
                                              2);  // + a guard row
    NewData(rng);
  }

  int64_t ExpertStride() const { return c_.hidden + c_.expert_pad; }
  int64_t OutStride() const { return c_.hidden + c_.out_pad; }

  // Fresh expert rows, a fresh map (a random permutation of the rows, as moe_permute's, with
  // invalid entries) and fresh weights, uploaded into the same buffers.
  void NewData(std::mt19937& rng) {
    const Case& c = c_;
    expert_ = kiln::testing::RandomTensor(
        c.dtype, static_cast<size_t>(c.expert_offset + (rows_ + kTrapRows) * ExpertStride()), rng);
    for (int64_t i = c.expert_offset + rows_ * ExpertStride(); i < static_cast<int64_t>(expert_.size()); ++i)
      expert_.Set(static_cast<size_t>(i), NAN);  // the trap rows
    expert_dev_->Upload(expert_.bytes);

    std::vector<int32_t> perm(static_cast<size_t>(rows_));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    slot_to_row_ = perm;
    if (c.invalid && c.tokens > 0) {
      const int32_t r = static_cast<int32_t>(rows_);
      const int32_t bad[] = {-1, -1, -7, INT_MIN, r, r + 3, INT_MAX};
      std::uniform_int_distribution<int> eighth(0, 7), which(0, 6);
      for (auto& v : slot_to_row_)
        if (eighth(rng) == 0) v = bad[which(rng)];
      const int64_t lost = c.tokens / 2;  // every choice of this token invalid
      for (int64_t j = 0; j < c.top_k; ++j) slot_to_row_[lost * c.top_k + j] = j % 2 == 0 ? -1 : r;
    }
    weights_.resize(static_cast<size_t>(rows_));
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (auto& w : weights_) w = unit(rng);
    WriteIndexRows(*slot_dev_, slot_to_row_.data(), -1);
    const float pad_weight = NAN;  // a kernel that read the padding would show it
    WriteIndexRows(*weights_dev_, weights_.data(), pad_weight);
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());  // before a launch on a non-blocking stream
  }

  TensorView expert_out() const {
    return TensorView::Strided(expert_dev_->data() + c_.expert_offset * 2, c_.dtype, {rows_, c_.hidden},
                               {ExpertStride(), 1});
  }
  TensorView slot_to_row() const {
    return TensorView::Strided(slot_dev_->data(), DType::kInt32, {c_.tokens, c_.top_k}, {c_.top_k + c_.index_pad, 1});
  }
  TensorView topk_weights() const {
    return TensorView::Strided(weights_dev_->data(), DType::kFloat32, {c_.tokens, c_.top_k},
                               {c_.top_k + c_.index_pad, 1});
  }
  TensorView out() const {
    return TensorView::Strided(out_dev_->data() + c_.out_offset * 2, c_.dtype, {c_.tokens, c_.hidden},
                               {OutStride(), 1});
  }

  void Poison() {
    KILN_CU(kiln::testing::Driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(out_dev_->data()), kPoison,
                                               out_dev_->bytes()));
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  }

  std::vector<uint8_t> Run(void* stream = nullptr) {
    Poison();
    const TensorView o = out(), e = expert_out(), s = slot_to_row(), w = topk_weights();
    const kiln::Status status = kiln::ops::moe_unpermute(o, e, s, w, stream);
    INFO(Describe(c_) << ": " << status.ToString());
    REQUIRE(status.ok());
    return Read();
  }

  std::vector<uint8_t> RunC() {
    Poison();
    const TensorView o = out(), e = expert_out(), s = slot_to_row(), w = topk_weights();
    DLTensor o_dl = kiln::testing::ToDLTensor(o), e_dl = kiln::testing::ToDLTensor(e);
    DLTensor s_dl = kiln::testing::ToDLTensor(s), w_dl = kiln::testing::ToDLTensor(w);
    const kiln_status status = kiln_moe_unpermute(&o_dl, &e_dl, &s_dl, &w_dl, nullptr);
    INFO(Describe(c_) << ": " << kiln_last_error());
    REQUIRE(status == KILN_OK);
    return Read();
  }

  std::vector<uint8_t> Read() const {
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    return out_dev_->Download();
  }

  // The whole out buffer: rows against both references, padding and the guard row poisoned.
  void Check(const std::vector<uint8_t>& got) const {
    const Case& c = c_;
    const std::vector<double> want = CombineReference(expert_, c.expert_offset, ExpertStride(), rows_, slot_to_row_,
                                                      weights_, c.tokens, c.top_k, c.hidden);
    const HostTensor exact = FmaChain(expert_, c.expert_offset, ExpertStride(), rows_, slot_to_row_, weights_, c.tokens,
                                      c.top_k, c.hidden);
    const kiln::testing::Tolerance tolerance = kiln::testing::ToleranceFor(c.dtype);
    HostTensor row = kiln::testing::MakeHostTensor(c.dtype, 1);
    std::vector<std::string> problems;
    auto expect = [&](bool ok, const auto& what) {
      if (!ok && problems.size() < 8) problems.push_back(what());
    };
    for (int64_t t = 0; t <= c.tokens; ++t) {
      for (int64_t h = 0; h < OutStride(); ++h) {
        const uint8_t* bits = got.data() + (c.out_offset + t * OutStride() + h) * 2;
        const bool poisoned = bits[0] == kPoison && bits[1] == kPoison;
        auto where = [&] { return "out[" + std::to_string(t) + ", " + std::to_string(h) + "]"; };
        if (t == c.tokens || h >= c.hidden) {
          expect(poisoned,
                 [&] { return where() + (t == c.tokens ? ": the guard row" : ": row padding") + " written"; });
          continue;
        }
        std::memcpy(row.bytes.data(), bits, 2);
        const double value = row.Get(0), w = want[t * c.hidden + h];
        expect(kiln::testing::Close(value, w, tolerance),
               [&] { return where() + " = " + std::to_string(value) + ", want " + std::to_string(w); });
        expect(std::memcmp(bits, exact.bytes.data() + (t * c.hidden + h) * 2, 2) == 0, [&] {
          return where() + " = " + std::to_string(value) + ": not the fp32 sum in the order of j (" +
                 std::to_string(exact.Get(static_cast<size_t>(t * c.hidden + h))) + ")";
        });
      }
    }
    if (c.invalid && c.tokens > 0) {  // the token without a valid choice: zeros
      const int64_t lost = c.tokens / 2;
      for (int64_t h = 0; h < c.hidden; ++h) {
        const uint8_t* bits = got.data() + (c.out_offset + lost * OutStride() + h) * 2;
        expect(bits[0] == 0 && bits[1] == 0, [&] { return "token " + std::to_string(lost) + " not zeros"; });
      }
    }
    std::string joined;
    for (const auto& p : problems) joined += "\n  " + p;
    INFO(Describe(c) << joined);
    CHECK(problems.empty());
  }

 private:
  // `values` ([T, top_k]) into the padded rows of `buffer`, `pad` in the padding.
  template <typename V>
  void WriteIndexRows(DeviceBuffer& buffer, const V* values, V pad) {
    const int64_t stride = c_.top_k + c_.index_pad;
    std::vector<V> rows(static_cast<size_t>(std::max<int64_t>(c_.tokens * stride, 1)), pad);
    for (int64_t t = 0; t < c_.tokens; ++t)
      for (int64_t j = 0; j < c_.top_k; ++j) rows[t * stride + j] = values[t * c_.top_k + j];
    buffer.Upload(kiln::testing::Bytes(rows.data(), rows.size() * sizeof(V)));
  }

  Case c_;
  int64_t rows_ = 0;
  HostTensor expert_;
  std::vector<int32_t> slot_to_row_;
  std::vector<float> weights_;
  std::unique_ptr<DeviceBuffer> expert_dev_, slot_dev_, weights_dev_, out_dev_;
};

TEST_CASE("moe_unpermute matches the float64 reference over tokens top_k hidden sizes and dtypes",
          "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(20261203);
  const int64_t hiddens[] = {8, 136, 2050, 4096, 7168, 2049};
  size_t n = 0;
  for (int64_t tokens : {1, 3, 64, 1000, 4096}) {
    for (int64_t top_k : {1, 2, 8}) {
      Case c{tokens, top_k, hiddens[n % 6]};
      if (tokens * top_k * c.hidden > int64_t{1} << 27) c.hidden = 2048;  // the host reference's time
      c.dtype = n % 2 == 0 ? DType::kBFloat16 : DType::kFloat16;
      c.out_pad = n % 3 == 1 ? 8 : 0;
      c.expert_pad = n % 4 == 2 ? 16 : 0;
      c.index_pad = n % 5 == 3 ? 3 : 0;
      ++n;
      Combine combine(c, rng);
      combine.Check(combine.Run());
    }
  }
}

TEST_CASE("moe_unpermute takes every copy unit, top_k 16 and rows without invalid entries",
          "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(16);
  auto make = [](int64_t tokens, int64_t top_k, int64_t hidden, DType dtype) {
    return Case{tokens, top_k, hidden, dtype};
  };
  std::vector<Case> cases;
  Case c = make(64, 8, 8, DType::kBFloat16);  // 16 bytes: one unit per row
  cases.push_back(c);
  c = make(200, 2, 136, DType::kFloat16);  // 272 bytes: 16
  cases.push_back(c);
  c.out_pad = 2;  // out rows of 276 bytes: 4
  cases.push_back(c);
  c = make(100, 8, 2050, DType::kBFloat16);  // 4100 bytes: 4
  c.expert_pad = 2;
  cases.push_back(c);
  c = make(100, 8, 2049, DType::kFloat16);  // odd: 2
  cases.push_back(c);
  c = make(300, 2, 4096, DType::kBFloat16);  // expert_out one element off: 2
  c.expert_offset = 1;
  cases.push_back(c);
  c = make(300, 2, 4096, DType::kFloat16);  // out 8 bytes off: 8
  c.out_offset = 4;
  cases.push_back(c);
  c = make(333, 16, 1024, DType::kBFloat16);  // top_k 16: two rounds of loads
  c.index_pad = 1;
  cases.push_back(c);
  c = make(1000, 8, 7168, DType::kBFloat16);  // DeepSeek-V3, every row valid
  c.invalid = false;
  cases.push_back(c);
  for (const Case& k : cases) {
    Combine combine(k, rng);
    combine.Check(combine.Run());
  }
}

TEST_CASE("moe_unpermute is deterministic and the C ABI and a second stream give the same bits",
          "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(3);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const Case& c : {Case{4096, 8, 2048, DType::kBFloat16}, Case{64, 2, 4096, DType::kFloat16, 8, 0, 2}}) {
    Combine combine(c, rng);
    const std::vector<uint8_t> a = combine.Run();
    combine.Check(a);
    const std::vector<uint8_t> b = combine.Run(stream);
    const std::vector<uint8_t> again = combine.Run();
    const std::vector<uint8_t> from_c = combine.RunC();
    INFO(Describe(c));
    CHECK(a == b);
    CHECK(a == again);
    CHECK(a == from_c);
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("moe_unpermute replays in a CUDA graph on new data", "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(11);
  Case c{512, 8, 2048, DType::kBFloat16, 0, 8};
  Combine combine(c, rng);
  combine.Check(combine.Run());  // loads the module outside the capture
  const TensorView o = combine.out(), e = combine.expert_out(), s = combine.slot_to_row(), w = combine.topk_weights();
  const kiln::testing::CapturedCall graph(
      [&](CUstream stream) { return kiln::ops::moe_unpermute(o, e, s, w, stream); });
  INFO(graph.status().ToString());
  REQUIRE(graph.status().ok());
  for (int round = 0; round < 3; ++round) {
    combine.NewData(rng);
    combine.Poison();
    graph.Replay();
    combine.Check(combine.Read());
  }
}

TEST_CASE("moe_unpermute with no tokens writes nothing", "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(0);
  Combine combine(Case{0, 8, 4096, DType::kBFloat16}, rng);
  const std::vector<uint8_t> got = combine.Run();
  CHECK(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPoison; }));
}

// route -> permute with the gather -> identity experts -> combine: out[t] = x[t] * (the sum of
// token t's valid weights), since every valid choice of t brings back x[t] itself.
TEST_CASE("moe_route then moe_permute then identity experts then moe_unpermute give x times the weight sum",
          "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  const auto& d = kiln::testing::Driver();
  std::mt19937 rng(8);
  struct Model {
    int64_t tokens, experts, top_k, hidden, align;
    DType dtype;
  };
  for (const Model& m : {Model{64, 8, 2, 4096, 1, DType::kBFloat16}, Model{1000, 256, 8, 7168, 128, DType::kBFloat16},
                         Model{333, 128, 8, 2048, 64, DType::kFloat16}}) {
    INFO("T " << m.tokens << " E " << m.experts << " top_k " << m.top_k << " H " << m.hidden << " align " << m.align);
    const HostTensor logits = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(m.tokens * m.experts),
                                                          rng);
    const HostTensor x = kiln::testing::RandomTensor(m.dtype, static_cast<size_t>(m.tokens * m.hidden), rng);
    const int64_t rows = kiln::ops::moe_permute_rows(m.tokens, m.top_k, m.experts, m.align);
    DeviceBuffer logits_dev(logits.bytes.size()), x_dev(x.bytes.size());
    logits_dev.Upload(logits.bytes);
    x_dev.Upload(x.bytes);
    DeviceBuffer ids(static_cast<size_t>(m.tokens * m.top_k * 4)), weights(static_cast<size_t>(m.tokens * m.top_k * 4));
    DeviceBuffer counts(static_cast<size_t>(m.experts * 4)), indptr(static_cast<size_t>((m.experts + 1) * 4));
    DeviceBuffer row_to_slot(static_cast<size_t>(rows * 4)), slot_to_row(static_cast<size_t>(m.tokens * m.top_k * 4));
    DeviceBuffer permuted(static_cast<size_t>(rows * m.hidden * 2)), out(static_cast<size_t>(m.tokens * m.hidden * 2));
    const TensorView logits_v = TensorView::Contiguous(logits_dev.data(), DType::kFloat32, {m.tokens, m.experts});
    const TensorView ids_v = TensorView::Contiguous(ids.data(), DType::kInt32, {m.tokens, m.top_k});
    const TensorView weights_v = TensorView::Contiguous(weights.data(), DType::kFloat32, {m.tokens, m.top_k});
    REQUIRE(kiln::ops::moe_route(ids_v, weights_v, logits_v, nullptr, kiln::ops::MoeRouteOptions{}).ok());
    KILN_CU(d.cuCtxSynchronize());
    // Drop some choices (an expert of another rank): those slots get no row.
    std::vector<int32_t> host_ids(static_cast<size_t>(m.tokens * m.top_k));
    const std::vector<uint8_t> id_bytes = ids.Download();
    std::memcpy(host_ids.data(), id_bytes.data(), id_bytes.size());
    for (size_t s = 0; s < host_ids.size(); s += 7) host_ids[s] = -1;
    ids.Upload(kiln::testing::Bytes(host_ids.data(), host_ids.size() * 4));
    KILN_CU(d.cuCtxSynchronize());

    const TensorView counts_v = TensorView::Contiguous(counts.data(), DType::kInt32, {m.experts});
    const TensorView indptr_v = TensorView::Contiguous(indptr.data(), DType::kInt32, {m.experts + 1});
    const TensorView r2s_v = TensorView::Contiguous(row_to_slot.data(), DType::kInt32, {rows});
    const TensorView s2r_v = TensorView::Contiguous(slot_to_row.data(), DType::kInt32, {m.tokens, m.top_k});
    const TensorView x_v = TensorView::Contiguous(x_dev.data(), m.dtype, {m.tokens, m.hidden});
    const TensorView permuted_v = TensorView::Contiguous(permuted.data(), m.dtype, {rows, m.hidden});
    const TensorView out_v = TensorView::Contiguous(out.data(), m.dtype, {m.tokens, m.hidden});
    permuted.Poison();  // rows past m_indptr[E] stay NaN: the combine must not read them
    out.Poison();
    REQUIRE(kiln::ops::moe_permute(counts_v, indptr_v, r2s_v, s2r_v, &permuted_v, ids_v, &x_v, m.align).ok());
    const kiln::Status combined = kiln::ops::moe_unpermute(out_v, permuted_v, s2r_v, weights_v);
    INFO(combined.ToString());
    REQUIRE(combined.ok());
    KILN_CU(d.cuCtxSynchronize());

    std::vector<float> host_weights(static_cast<size_t>(m.tokens * m.top_k));
    const std::vector<uint8_t> w_bytes = weights.Download();
    std::memcpy(host_weights.data(), w_bytes.data(), w_bytes.size());
    HostTensor got = kiln::testing::MakeHostTensor(m.dtype, static_cast<size_t>(m.tokens * m.hidden));
    got.bytes = out.Download();
    const kiln::testing::Tolerance tolerance = kiln::testing::ToleranceFor(m.dtype);
    size_t bad = 0;
    std::string first;
    for (int64_t t = 0; t < m.tokens; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < m.top_k; ++j)
        if (host_ids[t * m.top_k + j] >= 0) sum += host_weights[t * m.top_k + j];
      for (int64_t h = 0; h < m.hidden; ++h) {
        const size_t i = static_cast<size_t>(t * m.hidden + h);
        const double want = x.Get(i) * sum;
        if (!kiln::testing::Close(got.Get(i), want, tolerance) && bad++ == 0)
          first = "out[" + std::to_string(t) + ", " + std::to_string(h) + "] = " + std::to_string(got.Get(i)) +
                  ", want " + std::to_string(want);
      }
    }
    INFO(bad << " elements off; the first: " << first);
    CHECK(bad == 0);
  }
}

TEST_CASE("moe_unpermute refuses what it cannot combine through the real path", "[gpu][client][ops][moe][unpermute]") {
  kiln::testing::GpuSession session;
  DeviceBuffer out(7 * 64 * 2), expert(14 * 64 * 2), slots(7 * 17 * 4), weights(7 * 17 * 4);
  auto require_invalid = [](const kiln::Status& status, const std::string& fragment) {
    INFO(status.ToString());
    REQUIRE(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find(fragment) != std::string::npos);
  };
  auto m = [](DeviceBuffer& b, int64_t r, int64_t k, DType d) { return TensorView::Contiguous(b.data(), d, {r, k}); };
  require_invalid(kiln::ops::moe_unpermute(m(out, 7, 64, DType::kBFloat16), m(expert, 14, 64, DType::kBFloat16),
                                           m(slots, 7, 17, DType::kInt32), m(weights, 7, 17, DType::kFloat32)),
                  "slot_to_row: top_k (dim 1) must be 1 to 16, found 17");
  require_invalid(kiln::ops::moe_unpermute(m(out, 7, 64, DType::kFloat16), m(expert, 14, 64, DType::kBFloat16),
                                           m(slots, 7, 2, DType::kInt32), m(weights, 7, 2, DType::kFloat32)),
                  "out: expected dtype bf16 (expert_out's), found fp16");
  require_invalid(kiln::ops::moe_unpermute(m(out, 7, 32, DType::kBFloat16), m(expert, 14, 64, DType::kBFloat16),
                                           m(slots, 7, 2, DType::kInt32), m(weights, 7, 2, DType::kFloat32)),
                  "out: expected shape [7, 64]");
  require_invalid(kiln::ops::moe_unpermute(m(out, 7, 64, DType::kBFloat16), m(expert, 14, 64, DType::kBFloat16),
                                           m(slots, 7, 2, DType::kInt32), m(weights, 7, 3, DType::kFloat32)),
                  "topk_weights: expected shape [7, 2] (slot_to_row's), found [7, 3]");
  require_invalid(kiln::ops::moe_unpermute(m(expert, 7, 64, DType::kBFloat16), m(expert, 14, 64, DType::kBFloat16),
                                           m(slots, 7, 2, DType::kInt32), m(weights, 7, 2, DType::kFloat32)),
                  "out and expert_out overlap in memory");
}

}  // namespace
