// Routine "moe_permute" (kiln::ops::moe_permute): topk_ids [tokens, top_k] -> expert_counts,
// m_indptr, row_to_slot [rows], slot_to_row: the contiguous grouped layout of grouped_gemm, each
// group padded to a multiple of row_align. The ids are drawn like a router's: top_k distinct
// experts per token, uniformly (so every expert is about equally loaded).
//
// backends: kiln (the op: one block, match/scan ranks), reference (one thread walking the slots
// in order with a cursor per expert: obviously stable and correct). Every output is an integer,
// compared exactly against the CPU reference. The gather (x, permuted_x) is not in the trace
// definition (an optional output), so it is timed by neither backend here.
#include <algorithm>
#include <numeric>
#include <vector>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::bench {
namespace {

// The tensors of a case, in CaseSpec order.
enum : size_t { kCounts = 0, kIndptr, kRowToSlot, kSlotToRow, kIds };

constexpr const char* kReferenceSource = R"(
// One thread: counts, the aligned scan, then the slots in order, each to its expert's cursor.
extern "C" __global__ void kiln_bench_ref_moe_permute(int* counts, int* m_indptr, int* row_to_slot, int* slot_to_row,
                                                      const int* ids, long long slots, int experts, int align,
                                                      long long rows) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int cursor[256];
  for (int e = 0; e < experts; ++e) counts[e] = 0;
  for (long long s = 0; s < slots; ++s)
    if (ids[s] >= 0 && ids[s] < experts) counts[ids[s]] += 1;
  int run = 0;
  for (int e = 0; e < experts; ++e) {
    m_indptr[e] = run;
    cursor[e] = run;
    run += (counts[e] + align - 1) / align * align;
  }
  m_indptr[experts] = run;
  for (long long r = 0; r < rows; ++r) row_to_slot[r] = -1;
  for (long long s = 0; s < slots; ++s) {
    const int e = ids[s];
    int row = -1;
    if (e >= 0 && e < experts) {
      row = cursor[e]++;
      row_to_slot[row] = (int)s;
    }
    slot_to_row[s] = row;
  }
}
)";

class MoePermuteRoutine : public Routine {
 public:
  std::string_view name() const override { return moe::kMoePermuteOp; }
  std::string_view description() const override {
    return "top-k expert ids -> the grouped layout (counts, m_indptr, row_to_slot, slot_to_row), groups padded to "
           "row_align (kiln::ops::moe_permute)";
  }
  std::vector<std::string> axes() const override {
    return {"tokens", "top_k", "experts", "indptr_len", "row_align", "rows"};
  }
  std::vector<DType> dtypes() const override { return {DType::kInt32}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops (one block: match/scan ranks)"},
            {"reference", "one thread, the slots in order with a cursor per expert (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
    const int64_t experts = AxisValue(shape, "experts"), indptr_len = AxisValue(shape, "indptr_len");
    const int64_t align = AxisValue(shape, "row_align"), rows = AxisValue(shape, "rows");
    const std::string where = std::string(name()) + ": ";
    if (experts < 1 || experts > moe::kMaxExperts || indptr_len != experts + 1)
      return client::InvalidArgument(where + "experts=" + std::to_string(experts) +
                                     " indptr_len=" + std::to_string(indptr_len) + ": experts 1.." +
                                     std::to_string(moe::kMaxExperts) + ", indptr_len experts + 1");
    if (top_k < 1 || top_k > std::min<int64_t>(experts, moe::kMaxTopK))
      return client::InvalidArgument(where + "top_k=" + std::to_string(top_k) + " is outside 1..min(experts, " +
                                     std::to_string(moe::kMaxTopK) + ") (the ids of a token are distinct)");
    if (tokens < 1) return client::InvalidArgument(where + "tokens must be at least 1");
    if (align < 1 || align > moe::kMaxAlign || (align & (align - 1)) != 0)
      return client::InvalidArgument(where + "row_align=" + std::to_string(align) +
                                     " is not a power of two <= " + std::to_string(moe::kMaxAlign));
    if (rows < moe::MoePermuteRows(tokens, top_k, experts, align))
      return client::InvalidArgument(where + "rows=" + std::to_string(rows) + " is below " +
                                     std::to_string(moe::MoePermuteRows(tokens, top_k, experts, align)));
    CaseSpec spec;
    spec.axes = shape;
    TensorSpec ids{"topk_ids", dtype, {tokens, top_k}, TensorRole::kInput};
    ids.routine_fills = true;
    spec.tensors = {{"expert_counts", DType::kInt32, {experts}, TensorRole::kOutput},
                    {"m_indptr", DType::kInt32, {indptr_len}, TensorRole::kOutput},
                    {"row_to_slot", DType::kInt32, {rows}, TensorRole::kOutput},
                    {"slot_to_row", DType::kInt32, {tokens, top_k}, TensorRole::kOutput},
                    ids};
    // The ids read twice (counts, ranks), every output written once.
    spec.bytes = 4.0 * (3.0 * static_cast<double>(tokens * top_k) + static_cast<double>(experts + indptr_len + rows));
    return spec;
  }

  // top_k distinct experts per token, uniformly: a partial Fisher-Yates shuffle per token.
  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* tensors) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
    const int64_t experts = AxisValue(shape, "experts");
    std::vector<int> pool(static_cast<size_t>(experts));
    HostTensor& ids = (*tensors)[kIds];
    for (int64_t t = 0; t < tokens; ++t) {
      std::iota(pool.begin(), pool.end(), 0);
      for (int64_t j = 0; j < top_k; ++j) {
        std::uniform_int_distribution<int64_t> pick(j, experts - 1);
        std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(pick(rng))]);
        ids.Set(static_cast<size_t>(t * top_k + j), pool[static_cast<size_t>(j)]);
      }
    }
    return OkStatus();
  }

  ShapeAxes SmallShape() const override { return Shape(7, 3, 8, 4); }
  // One token; one expert; decode sizes; several rounds of the block (1000 * 8, 4096 * 8 slots)
  // with and without padding; a slot count no round size divides.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),          Shape(1, 2, 8, 1),       Shape(33, 1, 1, 2),       Shape(64, 8, 256, 1),
            Shape(64, 8, 128, 64), Shape(1000, 8, 128, 64), Shape(4096, 8, 256, 128), Shape(3001, 6, 64, 1)};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t experts = spec.tensors[kCounts].shape[0];
    const int64_t rows = spec.tensors[kRowToSlot].shape[0];
    const int64_t slots = spec.tensors[kIds].shape[0] * spec.tensors[kIds].shape[1];
    const int64_t align = AxisValue(spec.axes, "row_align");
    std::vector<double> counts(static_cast<size_t>(experts), 0.0), indptr(static_cast<size_t>(experts + 1), 0.0);
    std::vector<double> row_to_slot(static_cast<size_t>(rows), -1.0), slot_to_row(static_cast<size_t>(slots), -1.0);
    for (int64_t s = 0; s < slots; ++s) {
      const auto e = static_cast<int64_t>(t[kIds].Get(static_cast<size_t>(s)));
      if (e >= 0 && e < experts) counts[static_cast<size_t>(e)] += 1;
    }
    std::vector<int64_t> cursor(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
      cursor[static_cast<size_t>(e)] = static_cast<int64_t>(indptr[static_cast<size_t>(e)]);
      const auto c = static_cast<int64_t>(counts[static_cast<size_t>(e)]);
      indptr[static_cast<size_t>(e + 1)] = indptr[static_cast<size_t>(e)] +
                                           static_cast<double>((c + align - 1) / align * align);
    }
    for (int64_t s = 0; s < slots; ++s) {
      const auto e = static_cast<int64_t>(t[kIds].Get(static_cast<size_t>(s)));
      if (e < 0 || e >= experts) continue;
      const int64_t row = cursor[static_cast<size_t>(e)]++;
      row_to_slot[static_cast<size_t>(row)] = static_cast<double>(s);
      slot_to_row[static_cast<size_t>(s)] = static_cast<double>(row);
    }
    (*expected)[kCounts] = std::move(counts);
    (*expected)[kIndptr] = std::move(indptr);
    (*expected)[kRowToSlot] = std::move(row_to_slot);
    (*expected)[kSlotToRow] = std::move(slot_to_row);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    const int64_t align = AxisValue(shape, "row_align");
    if (backend == "kiln") {
      return BackendFn([align](const TensorSet& t, CUstream stream) {
        return ops::moe_permute(t[kCounts], t[kIndptr], t[kRowToSlot], t[kSlotToRow], nullptr, t[kIds], nullptr, align,
                                stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_moe_permute", kReferenceSource,
                                                             "kiln_bench_ref_moe_permute", dtype));
      const long long slots = AxisValue(shape, "tokens") * AxisValue(shape, "top_k");
      const int experts = static_cast<int>(AxisValue(shape, "experts"));
      const long long rows = AxisValue(shape, "rows");
      return BackendFn([k = kernel, slots, experts, align, rows](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 32;
        config.grid.x = 1;
        config.stream = stream;
        return k(config, t[kCounts].data, t[kIndptr].data, t[kRowToSlot].data, t[kSlotToRow].data, t[kIds].data, slots,
                 experts, static_cast<int>(align), rows);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }

 private:
  static ShapeAxes Shape(int64_t tokens, int64_t top_k, int64_t experts, int64_t align) {
    return {{"tokens", tokens},   {"top_k", top_k},
            {"experts", experts}, {"indptr_len", experts + 1},
            {"row_align", align}, {"rows", moe::MoePermuteRows(tokens, top_k, experts, align)}};
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(MoePermuteRoutine);

}  // namespace kiln::bench
