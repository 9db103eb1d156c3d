// The gemm kernel on Hopper: D = A · B^T (+ bias) (+ beta · C), A [m, k] and B [n, k] K-major,
// fp32 accumulation in registers.
//
// A block is persistent and warp-specialized:
//   - warp-group 0 is the producer: one thread walks the block's tiles and, per K step, waits
//     until a pipeline stage is free, then has TMA load the A and B tiles of that step into it
//     (both 128-byte swizzled, kTileK = 64 elements wide);
//   - warp-groups 1..kConsumers are the consumers: each owns 64 rows of the tile, waits for a
//     stage to be full, issues 4 wgmma m64nNk16 from shared memory, keeps one wgmma group in
//     flight and releases the stage before (one arrival per consumer warp), and at the end of
//     a tile applies the epilogue: through a staging buffer and TMA stores that run on while
//     the next tile starts (StagedEpilogue, when the tactic has the buffers and the launch set
//     d_store), else from registers straight to global memory.
// Stages are a ring of `kStages` buffers with two mbarriers each: `full` (one producer arrival
// + the TMA bytes) and `empty` (one arrival per consumer warp). The ring and its phase bits
// continue across tiles, so the producer fetches the next tile while the consumers finish the
// last one's epilogue.
//
// Tiles are visited in raster groups of kGroupM tile rows (all tile columns of a group before
// the next group), so the blocks running at once share A rows and B columns in L2.
//
// Split-K (kSplitK > 1, for shapes with too few tiles to fill the SMs, as a small M has): the
// kernel runs in clusters of kSplitK blocks, and the blocks of a cluster work on the same tile,
// block r on the r-th slice of the K steps. At the end of a tile each consumer thread writes its
// fp32 fragment to its block's partial buffer and arrives on the `ready` barrier of every block
// of the cluster; once all have, block r adds, for its share of the fragment's column groups,
// the partials of blocks 0..kSplitK-1 in that order (the sum does not depend on timing: the
// result is deterministic) reading them through distributed shared memory, applies the
// epilogue, and arrives on every block's `drained` barrier, which a block waits for before it
// overwrites its partials (next tile) or exits (its shared memory must outlive the readers).
// No global workspace and no atomics: the launch stays a single kernel and graph-capturable.
//
// Multicast (kMulticast 2, for large M, where the L2 reads of the tiles limit a compute-bound
// kernel): the kernel runs in clusters of two blocks, and a cluster's unit of work is a pair of
// vertically adjacent tiles (tile rows 2i and 2i + 1, the same tile column), which read the same
// tile of B. Each block loads its own A and half of B's rows, the half multicast into both
// blocks' stage (cp.async.bulk.tensor .multicast::cluster), so B is read from L2 once for the
// two. A stage of a block is then written by both producers: it is free only when the consumers
// of both blocks have released it (each consumer warp arrives on its own block's `empty` and on
// the other's), and a block leaves only after the other block's consumers have made their last
// arrival on its barriers (`done`). A pair's second tile past M (odd tile rows) loads no A,
// still loads its half of B for the first, and stores nothing.
//
// Grouped (kLayout contiguous or masked: grouped_gemm): the groups' rows are on the device, so
// every block first builds, in shared memory, the table of each group's first tile row (warp 0,
// a scan over at most kMaxGroups groups); the tile rows of all groups then form one sequence
// that the raster order walks as if it were one matrix, and a tile's group is found by a binary
// search in the table. B's rows of group e start at e * n; D's rows past the group's count are
// not written (A's rows there belong to the next group or are zeros: their products are
// discarded).
//
// silu_and_mul (kEpilogue kSiluAndMulEpilogue, grouped 16-bit only: fused_moe's gate-and-up
// GEMM): each group's n rows of B are [gate; up]; a tile makes tile_n / 2 columns of D, its B
// stage the tile's tile_n / 2 gate rows and, from n / 2 rows further, the same up rows (two TMA
// loads), so one wgmma of width tile_n computes both, and the consumer thread that holds gate
// column c holds up column c in the same register of the other half: D = silu(gate) * up in
// fp32, rounded once, with no pass over an intermediate [rows, n] tensor. On fp8 inputs (e4m3 D,
// tile_n 256: fused_moe_fp8's gate-and-up GEMM) the tile's 128 columns of D are one scale group:
// each row's silu(gate) * up is quantized there, by fused_moe_fp8's rule, into codes and a scale
// (SiluAndMulE4m3Epilogue), so the layer's separate silu-and-quantize pass is not needed.
//
// Gathered A (kAGather, contiguous grouped only: fused_moe's gate-and-up GEMMs): row r of the
// groups' rows is row a_rows[r] / a_row_divisor of `a` (x, or its codes, by moe_permute's
// row_to_slot), which TMA cannot address (a box is rows of one stride). The producer warp-group
// loads A instead, kTileM / 32 of its warps (each lane finds one row's source per tile: four
// warps keep the producer's registers within its 40; one warp holding four rows a lane spilled):
// per stage a warp copies its 32 rows 16 bytes a lane with cp.async into the layout TMA's
// 128-byte swizzle would have made (16-byte unit u of row r at unit u ^ (r % 8)), zeros for rows
// past the group, bad entries and K past the end; each lane's copies then arrive on the stage's
// `full` barrier (cp.async.mbarrier.arrive.noinc: kTileM arrivals beside the one that expects
// B's TMA bytes). cp.async writes shared memory through the generic proxy and wgmma reads it
// through the async proxy, so a consumer fences the proxies (fence.proxy.async) after
// its wait, before its wgmmas. fp8 A scales are read by the same map. Measured on an H100
// (bench/results/2026-12-07-h100-gather.md): 8-10 % slower than the TMA kernel on copied rows at
// Qwen3-30B-A3B's w13, 34 % at Mixtral-8x7B's, faster where the copied rows overflow L2
// (DeepSeek-V3 fp8); signalling from the copying lanes after their own wait and fence instead was
// slower still (the loads' latency, not the fence, limits it). fused_moe gathers only where that
// pays (FusedMoeGatherSuits).
#pragma once

#include "kiln/activation/act_and_mul.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/pair_io.cuh"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/gemm/hopper.cuh"
#include "kiln/gemm/wgmma_calls.cuh"
#include "kiln/moe/fp8_group_quant.cuh"

namespace kiln {
namespace gemm {

// The first type when the condition holds, else the second (no <type_traits> under NVRTC).
template <bool kFirst, typename A, typename B>
struct Choose {
  using type = A;
};
template <typename A, typename B>
struct Choose<false, A, B> {
  using type = B;
};

template <typename TIn_, typename TOut_, int kTileM_, int kTileN_, int kStages_, int kGroupM_, int kSplitK_ = 1,
          int kLayout_ = kDenseLayout, int kMulticast_ = 1, int kEpilogue_ = kPlainEpilogue, bool kAGather_ = false>
struct GemmShape {
  using TIn = TIn_;
  using TOut = TOut_;
  static constexpr int kTileM = kTileM_;
  static constexpr int kTileN = kTileN_;
  static constexpr int kStages = kStages_;
  static constexpr int kGroupM = kGroupM_;
  static constexpr int kSplitK = kSplitK_;
  static constexpr int kLayout = kLayout_;
  static constexpr int kMulticast = kMulticast_;
  static constexpr bool kGrouped = kLayout != kDenseLayout;
  // A's rows gathered through GemmParams::a_rows by the producer warp (cp.async), not TMA.
  static constexpr bool kAGather = kAGather_;
  // silu_and_mul (gemm_contract.h, GemmEpilogue): a tile's B stage is tile_n / 2 gate rows then
  // the same up rows, and the tile makes tile_n / 2 columns of D.
  static constexpr bool kSiluAndMul = kEpilogue_ == kSiluAndMulEpilogue;
  static constexpr int kOutTileN = kSiluAndMul ? kTileN_ / 2 : kTileN_;  // columns of D a tile makes
  // silu_and_mul into e4m3 codes and a scale per row and 128 columns (the grouped fp8 gemm's).
  static constexpr bool kE4m3Out = sizeof(TOut_) == 1;
  // fp8 (e4m3) inputs: block-scaled (fp8_gemm). A stage holds 128 bytes of K either way: 64
  // elements of a 16-bit type, 128 of fp8 (one scale block).
  static constexpr bool kFp8 = sizeof(TIn_) == 1;
  static constexpr int kStageK = 128 / static_cast<int>(sizeof(TIn_));
  // bias has A's type; with fp8 inputs, D's.
  using TBias = typename Choose<kFp8, TOut_, TIn_>::type;
  static constexpr int kConsumers = GemmConsumers(kTileM);
  static constexpr int kThreads = GemmThreads(kTileM);
  static constexpr int kBytesA = kTileM * kTileK * 2;  // one stage's A tile
  static constexpr int kBytesB = kTileN * kTileK * 2;
  static constexpr int kBytesBPart = kBytesB / kMulticast;  // the part of B's tile a block loads
  static constexpr int kAccumulators = kTileN / 2;          // fp32 registers of a consumer thread
  static constexpr int kColumnGroups = kTileN / 8;          // 4 accumulators each: the epilogue's unit
  // The TMA-store epilogue's staging buffers (one per consumer), whether the epilogue stores
  // through them (GemmStagedStoresFit: not silu_and_mul's 32- or 96-column tiles, not grouped
  // fp8), and the columns of a chunk.
  static constexpr bool kStoreStaging = GemmHasStoreStaging(kTileM, kTileN, kStages, kSplitK, kGrouped, kMulticast_);
  static constexpr bool kStagedStores = kStoreStaging &&
                                        GemmStagedStoresFit(kOutTileN, static_cast<int>(sizeof(TOut_)), kGrouped, kFp8);
  static constexpr int kChunkColumns = GemmStoreChunkColumns(kOutTileN, static_cast<int>(sizeof(TOut_)));

  static_assert(sizeof(TIn) == 2 || sizeof(TIn) == 1, "A and B are 16-bit (bf16, fp16) or fp8 (e4m3)");
  static_assert(kTileM == 64 || kTileM == 128, "tile_m is 64 or 128 (64 rows per consumer warp-group)");
  static_assert(kTileN == 64 || kTileN == 128 || kTileN == 192 || kTileN == 256, "tile_n is a wgmma N this header has");
  static_assert(kStages >= kMinStages && kStages <= kMaxStages, "stages out of range");
  static_assert(GemmSplitKAllowed(kSplitK), "split_k is one of kSplitKChoices");
  static_assert(kColumnGroups % kSplitK == 0, "each block of a cluster reduces whole column groups");
  static_assert(!kGrouped || kSplitK == 1, "grouped_gemm does not split K");
  static_assert(kMulticast == 1 || kMulticast == 2, "multicast pairs two blocks or none");
  static_assert(kMulticast == 1 || (kSplitK == 1 && !kGrouped), "multicast is for the dense gemm and fp8_gemm");
  static_assert(kEpilogue_ == kPlainEpilogue || (kSiluAndMul && kGrouped && kFp8 == kE4m3Out),
                "silu_and_mul is an epilogue of the grouped gemm: 16-bit D on 16-bit inputs, e4m3 D on fp8");
  static_assert(!kE4m3Out || (kSiluAndMul && kTileN == 256 && kOutTileN == kFp8ScaleBlock),
                "e4m3 D is the fp8 silu_and_mul epilogue's, whose tile's 128 columns are one scale group");
  static_assert(!kSiluAndMul || (kTileN / 2) % 8 == 0, "each half of B's tile starts on a swizzle atom");
  static_assert(kBytesBPart % 1024 == 0, "each block's part of B starts on a swizzle atom");
  static_assert(!kAGather || kLayout == kContiguousLayout, "a_gather is for the contiguous grouped ops");
  static_assert(!kAGather || (kTileM % 32 == 0 && kTileM <= 128), "a gathered tile is 32 rows a producer warp");
  static_assert(kMaxGroups % 32 == 0, "the group table is built by one warp, kMaxGroups / 32 groups a lane");
  static_assert(GemmSmemBytes(kTileM, kTileN, kStages, kSplitK, kGrouped, kMulticast) <= kMaxSmemBytes,
                "the stages exceed shared memory");
  static_assert(kBytesA % 1024 == 0 && kBytesB % 1024 == 0, "stage buffers stay 1024-byte aligned");
};

// Named barriers of the consumers: 1 + consumer is a consumer's own (the staged epilogue);
// kTurnBarrier + consumer its turn to issue wgmmas in the fp8 ping-pong.
constexpr int kTurnBarrier = 3;

namespace detail {

// The tile (row, column) of persistent work item `tile`.
template <class S>
__device__ __forceinline__ void TileOf(long long tile, long long tiles_m, long long tiles_n, long long& tm,
                                       long long& tn) {
  const long long per_group = static_cast<long long>(S::kGroupM) * tiles_n;
  const long long group = tile / per_group;
  const long long first_m = group * S::kGroupM;
  const long long rows = tiles_m - first_m < S::kGroupM ? tiles_m - first_m : S::kGroupM;
  const long long in_group = tile - group * per_group;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

// Column group j (4 accumulators: rows r and r + 8, two columns each) of a consumer's 64 x kTileN
// fragment to D, with the bias and beta * C. The wgmma D fragment (PTX ISA, "Register
// Fragments and Shared Memory Matrix Layouts" of wgmma, m64nNk16 fp32): thread t of the
// warp-group, warp w = t / 32, lane l; register 4j + 2h + e is row 16w + l/4 + 8h, column
// 8j + 2(l%4) + e. n is a multiple of 8 and columns come in even pairs, so a pair is inside D
// or outside. `row_base` and `col_base` are this thread's row (h = 0) and column (j = 0, e = 0).
template <class S>
__device__ __forceinline__ void StoreGroup(const GemmParams& p, const float (&v)[4], long long row_base,
                                           long long col_base, int j, long long row_end) {
  using TOut = typename S::TOut;
  using TBias = typename S::TBias;
  const long long col = col_base + 8 * j;
  if (col >= p.n) return;
  TOut* d = static_cast<TOut*>(p.d);
  const TOut* c = static_cast<const TOut*>(p.c);
  const TBias* bias = static_cast<const TBias*>(p.bias);
  // Without a bias -0 is added, which leaves every sum as it is (+0 would turn a -0 sum into
  // +0): the same bits as Epilogue's common case, which adds nothing, at no cost beyond the add
  // itself.
  float bias0 = -0.0f, bias1 = -0.0f;
  if (bias != nullptr) LoadPair(bias + col, bias0, bias1);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = row_base + 8 * h;
    if (row >= row_end) continue;
    float v0 = v[2 * h] + bias0;
    float v1 = v[2 * h + 1] + bias1;
    if (c != nullptr) {
      float c0, c1;
      LoadPair(c + row * p.c_row_stride + col, c0, c1);
      v0 = fmaf(p.beta, c0, v0);
      v1 = fmaf(p.beta, c1, v1);
    }
    StorePair(d + row * p.d_row_stride + col, v0, v1);
  }
}

// This thread's row (h = 0) and column (j = 0, e = 0) in a fragment at (row0, col0) of D.
__device__ __forceinline__ long long FragmentRow(long long row0) {
  const int t = threadIdx.x % 128;
  return row0 + 16 * (t / 32) + (t % 32) / 4;
}
__device__ __forceinline__ long long FragmentColumn(long long col0) { return col0 + 2 * ((threadIdx.x % 128) % 4); }

// A consumer's whole fragment to D (no split). The grouped fp8 kernels (which always store from
// registers) take a common case first: no bias or C (the grouped ops have neither), both of this
// thread's rows inside and the tile's columns all inside D. Its stores are two row pointers at
// fixed offsets, a conversion and a store a pair; the general loop below tests each column
// group's column, the bias and C pointers and each row, and computes each address (about 25
// instructions a group against 4: at Qwen3-30B-A3B's K 768, six K blocks a tile, that was most
// of a grouped tile's instructions beside its K loop's). Measured on an H100 against the general
// loop alone (bench/results/2026-12-07-h100-grouped-epilogue.md): grouped fp8 Qwen3 w2 7.7 %
// faster, w13 and Mixtral w2 2 %, Mixtral w13 1.4 % slower; the 16-bit grouped gemm, which
// took it too on the branch, was 3-4 % slower at both models' w13 with the same K loop (its
// kernel 8 % longer), so the others keep the general loop.
template <class S>
__device__ __forceinline__ void Epilogue(const GemmParams& p, const float (&acc)[S::kAccumulators], long long row0,
                                         long long col0, long long row_end) {
  const long long row_base = FragmentRow(row0);
  const long long col_base = FragmentColumn(col0);
  if constexpr (S::kGrouped && S::kFp8) {
    if (p.bias == nullptr && p.c == nullptr && row_base + 8 < row_end && col0 + S::kTileN <= p.n) {
      using TOut = typename S::TOut;
      TOut* d0 = static_cast<TOut*>(p.d) + row_base * p.d_row_stride + col_base;
      TOut* d1 = d0 + 8 * p.d_row_stride;
#pragma unroll
      for (int j = 0; j < S::kColumnGroups; ++j) {
        StorePair(d0 + 8 * j, acc[4 * j], acc[4 * j + 1]);
        StorePair(d1 + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < S::kColumnGroups; ++j) {
    const float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
    StoreGroup<S>(p, v, row_base, col_base, j, row_end);
  }
}

// silu_and_mul (S::kSiluAndMul): a consumer's fragment holds the gate columns 0 .. kTileN/2 - 1
// and, kTileN/2 columns (kColumnGroups / 2 column groups) further, the up columns of the same
// outputs, in the same thread and register position: D's column group j is silu(gate group j) *
// up group j, in fp32, stored like any other (rows < row_end, columns < n / 2).
template <class S>
__device__ __forceinline__ void SiluAndMulEpilogue(const GemmParams& p, const float (&acc)[S::kAccumulators],
                                                   long long row0, long long col0, long long row_end) {
  constexpr int kHalfGroups = S::kColumnGroups / 2;
  const long long row_base = FragmentRow(row0);
  const long long col_base = FragmentColumn(col0);
  const long long n_out = p.n / 2;
  using TOut = typename S::TOut;
  TOut* d = static_cast<TOut*>(p.d);
#pragma unroll
  for (int j = 0; j < kHalfGroups; ++j) {
    const long long col = col_base + 8 * j;
    if (col >= n_out) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = row_base + 8 * h;
      if (row >= row_end) continue;
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e)
        v[e] = activation::Silu::Apply(acc[4 * j + 2 * h + e]) * acc[4 * (j + kHalfGroups) + 2 * h + e];
      StorePair(d + row * p.d_row_stride + col, v[0], v[1]);
    }
  }
}

// silu_and_mul into e4m3 (S::kE4m3Out, fp8 inputs, tile_n 256): the tile's 128 columns of D are
// one scale group. Per row of its fragment (h), a thread holds 32 of the row's 128 values; the
// row's other values are in the three lanes of its quad (l / 4 equal), so two butterfly steps give
// every lane the row's amax. Each value is what fused_moe_fp8's separate path makes of the same
// accumulators: gate and up rounded to bf16 (the plain kernel's store; the fp8 K loop computes
// each accumulator alike at any tile column, m64n128k32 a half), silu(gate) * up in fp32 as its
// silu-and-quantize does, then scale and codes by the same functions
// (kiln/moe/fp8_group_quant.cuh; a maximum does not depend on its order): the codes and scales are
// that path's, bit for bit (tested on the GPU), so the layer's result does not depend on which
// path quantized. A code pair is a 16-bit store, the scale comes from the quad's first lane. The
// shuffles run in every lane; the stores only for rows < row_end.
template <class S>
__device__ __forceinline__ void SiluAndMulE4m3Epilogue(const GemmParams& p, const float (&acc)[S::kAccumulators],
                                                       long long row0, long long col0, long long row_end) {
  constexpr int kHalfGroups = S::kColumnGroups / 2;  // 16: 8 columns each, two of them this thread's
  const long long row_base = FragmentRow(row0);
  const long long col_base = FragmentColumn(col0);
  unsigned char* d = static_cast<unsigned char*>(p.d);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[2 * kHalfGroups];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kHalfGroups; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float gate = ToFloat(FromFloat<__nv_bfloat16>(acc[4 * j + 2 * h + e]));
        const float up = ToFloat(FromFloat<__nv_bfloat16>(acc[4 * (j + kHalfGroups) + 2 * h + e]));
        v[2 * j + e] = activation::Silu::Apply(gate) * up;
        amax = fmaxf(amax, fabsf(v[2 * j + e]));
      }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const long long row = row_base + 8 * h;
    if (row >= row_end) continue;
    const float scale = moe::Fp8GroupScale(amax);
    float x[2 * kHalfGroups];
    moe::QuotientsByScale(v, scale, x);
    unsigned char* out = d + row * p.d_row_stride + col_base;
#pragma unroll
    for (int j = 0; j < kHalfGroups; ++j)
      *reinterpret_cast<unsigned short*>(out + 8 * j) = moe::ToE4m3x2(x[2 * j], x[2 * j + 1]);
    if (threadIdx.x % 4 == 0) p.d_scales[row * p.d_scale_stride + col0 / kFp8ScaleBlock] = scale;
  }
}

// The byte of element (row, column) of a chunk in the staging buffer: the chunk is boxes of
// kBoxColumns columns x 64 rows (D's tensor-map box, 128-byte rows, 8 KiB each, 1024-byte
// aligned), each in the 128-byte swizzle the map names: the 16-byte unit u of row r is at unit
// u ^ (r % 8) of its row (PTX ISA, "Tensor Swizzling Modes"). A warp writes one 16-byte unit in
// each of 8 consecutive rows at a time, so the units land in 8 different bank quads.
template <class S>
__device__ __forceinline__ int StagingOffset(int row, int column) {
  constexpr int kOutBytes = static_cast<int>(sizeof(typename S::TOut));
  constexpr int kBoxColumns = GemmStoreBoxColumns(kOutBytes);
  const int box = column / kBoxColumns;
  const int byte = (column % kBoxColumns) * kOutBytes;
  return box * kRowsPerConsumer * kStoreBoxBytes + row * kStoreBoxBytes + ((((byte >> 4) ^ row) & 7) << 4) +
         (byte & 15);
}

// A consumer's whole fragment to D through its staging buffer and TMA stores (the tactic has
// the buffers and the launch set d_store): per chunk of kChunkColumns columns, the warp-group
// waits until its previous stores have read the buffer, writes the chunk (plus bias, converted;
// silu_and_mul: silu(gate) * up, as SiluAndMulEpilogue computes it), makes it visible to the
// async proxy, and its first thread has TMA store the chunk's boxes and commits. The warp-group
// then goes on to the next tile while the stores run; rows past M and columns past D's are
// clipped by TMA (grouped, the caller stores this way only 64 rows inside the tile's group).
template <class S>
__device__ __forceinline__ void StagedEpilogue(const GemmParams& p, const float (&acc)[S::kAccumulators],
                                               unsigned char* staging, long long row0, long long col0, int consumer) {
  using TOut = typename S::TOut;
  using TBias = typename S::TBias;
  constexpr int kChunks = S::kOutTileN / S::kChunkColumns;
  constexpr int kGroupsPerChunk = S::kChunkColumns / 8;
  constexpr int kHalfGroups = S::kColumnGroups / 2;  // silu_and_mul: the up columns' offset in groups
  constexpr int kBoxColumns = GemmStoreBoxColumns(static_cast<int>(sizeof(TOut)));
  constexpr int kBoxes = S::kChunkColumns / kBoxColumns;
  static_assert(S::kChunkColumns % kBoxColumns == 0 && S::kOutTileN % S::kChunkColumns == 0,
                "a tile is whole chunks, a chunk whole boxes");
  const long long n_out = S::kSiluAndMul ? p.n / 2 : p.n;  // D's columns
  if (row0 >= p.m) return;                                 // a multicast pair's tile past M: nothing to store
  const int t = static_cast<int>(threadIdx.x % 128);
  const bool leader = t == 0;
  const int row = 16 * (t / 32) + (t % 32) / 4;  // this thread's row (h = 0) in the 64
  const int pair = 2 * (t % 4);                  // and its column in a group of 8
  const TBias* bias = static_cast<const TBias*>(p.bias);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const long long chunk_col = col0 + c * S::kChunkColumns;
    if (chunk_col >= n_out) break;  // uniform: the rest of the tile is past D's columns
    if (leader) BulkWaitRead<0>();
    NamedBarrierSync(1 + consumer, 128);
#pragma unroll
    for (int jj = 0; jj < kGroupsPerChunk; ++jj) {
      const int j = c * kGroupsPerChunk + jj;
      float bias0 = -0.0f, bias1 = -0.0f;  // no bias: -0, which changes no sum (StoreGroup)
      if (!S::kSiluAndMul && bias != nullptr) {
        const long long col = chunk_col + 8 * jj + pair;
        if (col < p.n) LoadPair(bias + col, bias0, bias1);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = acc[4 * j + 2 * h + e];
          if constexpr (S::kSiluAndMul) {
            v[e] = activation::Silu::Apply(x) * acc[4 * (j + kHalfGroups) + 2 * h + e];
          } else {
            v[e] = x + (e == 0 ? bias0 : bias1);
          }
        }
        TOut* slot = reinterpret_cast<TOut*>(staging + StagingOffset<S>(row + 8 * h, 8 * jj + pair));
        StorePair(slot, v[0], v[1]);
      }
    }
    FenceProxyAsyncShared();
    NamedBarrierSync(1 + consumer, 128);
    if (leader) {
#pragma unroll
      for (int b = 0; b < kBoxes; ++b) {
        const long long box_col = chunk_col + b * kBoxColumns;
        if (box_col < n_out)
          TmaStore2d(&p.d_map, staging + b * kRowsPerConsumer * kStoreBoxBytes, static_cast<int>(box_col),
                     static_cast<int>(row0));
      }
      BulkCommit();
    }
  }
}

// grouped: the rows [start, start + count) of A and D that group e has, clamped into A and D.
template <class S>
__device__ __forceinline__ void GroupRows(const GemmParams& p, int e, long long& start, long long& count) {
  if constexpr (S::kLayout == kContiguousLayout) {
    long long first = p.group_rows[e], end = p.group_rows[e + 1];
    first = first < 0 ? 0 : (first > p.m ? p.m : first);
    end = end < first ? first : (end > p.m ? p.m : end);
    start = first;
    count = end - first;
  } else {
    const long long rows = p.group_rows[e];
    start = static_cast<long long>(e) * p.group_stride;
    count = rows < 0 ? 0 : (rows > p.group_stride ? p.group_stride : rows);
  }
}

// grouped: table[e] = the first tile row of group e, table[groups] = the tile rows of all (warp
// 0; each lane a run of kMaxGroups / 32 groups, then a scan of the runs across the lanes).
template <class S>
__device__ __forceinline__ void BuildGroupTable(const GemmParams& p, int* table) {
  constexpr int kPerLane = kMaxGroups / 32;
  const int lane = static_cast<int>(threadIdx.x);
  int tiles[kPerLane];
  int mine = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane * kPerLane + i;
    tiles[i] = 0;
    if (e < p.groups) {
      long long start, count;
      GroupRows<S>(p, e, start, count);
      tiles[i] = static_cast<int>((count + S::kTileM - 1) / S::kTileM);
    }
    mine += tiles[i];
  }
  int inclusive = mine;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  int run = inclusive - mine;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane * kPerLane + i;
    if (e < p.groups) table[e] = run;
    run += tiles[i];
  }
  if (lane == 31) table[p.groups] = inclusive;
}

// Where tile (tm, tn) reads and writes: A's first row, B's first row, D's first row and the end
// of the rows D may take there.
struct TileRows {
  long long a;
  long long b;
  long long d_end;
};
template <class S>
__device__ __forceinline__ TileRows Locate(const GemmParams& p, const int* table, long long tm, long long tn) {
  if constexpr (!S::kGrouped) {
    return {tm * S::kTileM, tn * S::kTileN, p.m};
  } else {
    // The last group whose first tile row is <= tm: empty groups share their successor's entry,
    // and the last of equal entries is the one that has the rows.
    int lo = 0, hi = p.groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (table[mid] <= tm) lo = mid;
      else hi = mid - 1;
    }
    long long start, count;
    GroupRows<S>(p, lo, start, count);
    const long long row = start + (tm - table[lo]) * S::kTileM;
    // silu_and_mul: B's gate rows of the tile (its up rows are n / 2 further).
    return {row, static_cast<long long>(lo) * p.n + tn * S::kOutTileN, start + count};
  }
}

// B's part of K step ks for the tile whose B rows start at row_b, by TMA into `stage_b` (both
// producers' load, the gathering one's and the TMA one's without multicast): with the silu_and_mul
// epilogue the gate rows, then the up rows n / 2 further (B's map: boxes of tile_n / 2 rows).
template <typename S>
__device__ __forceinline__ void LoadStageB(const GemmParams& p, unsigned char* stage_b, unsigned long long* full,
                                           int ks, int row_b) {
  if constexpr (S::kSiluAndMul) {
    TmaLoad2d(stage_b, &p.b_map, full, ks * S::kStageK, row_b);
    TmaLoad2d(stage_b + S::kBytesB / 2, &p.b_map, full, ks * S::kStageK, row_b + static_cast<int>(p.n / 2));
  } else {
    TmaLoad2d(stage_b, &p.b_map, full, ks * S::kStageK, row_b);
  }
}

// Gathered A: the row of `a` that row `row` of the groups' rows (< m) reads, or -1 (zeros) for
// an entry outside [0, a_row_count * a_row_divisor).
__device__ __forceinline__ int GatheredRow(const GemmParams& p, long long row) {
  const int entry = p.a_rows[row];
  if (entry < 0) return -1;
  const int source = entry / p.a_row_divisor;
  return source < p.a_row_count ? source : -1;
}

// Gathered A: one producer warp's copies of one stage, 32 of the tile's rows (`rows`: the first
// of them in the stage buffer) of 128 bytes from byte `col` of their source rows (`source`: lane
// l's row's, -1 for zeros), a pass 4 rows x 8 units of 16 bytes (lane l: row 4 i + l / 8 of the
// 32, unit l % 8; each row's 128 bytes in one pass), in the 128-byte swizzle (the 32 rows start
// on a swizzle atom, so a row's place in it is its index mod 8); then this lane's arrival on
// `full` once they land.
template <class S>
__device__ __forceinline__ void GatherStage(const GemmParams& p, int source, unsigned char* rows, long long col,
                                            unsigned long long* full) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int unit = lane % 8;
  const unsigned char* a = static_cast<const unsigned char*>(p.a) + col + 16 * unit;
  const bool col_inside = col + 16 * unit < p.k * static_cast<long long>(sizeof(typename S::TIn));
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 4 * i + lane / 8;
    const int from = __shfl_sync(0xffffffffu, source, row);
    const bool valid = col_inside && from >= 0;
    CpAsync16(rows + row * 128 + ((unit ^ (row % 8)) << 4), valid ? a + from * p.a_row_stride : p.a, valid);
  }
  CpAsyncBarrierArrive(full);
}

// The split-K partial buffer of a block: per consumer, per column group j, per thread t of the
// warp-group, the 4 accumulators of j (16 bytes): a warp reads or writes 512 contiguous bytes.
template <class S>
__device__ __forceinline__ unsigned PartialOffset(int consumer, int j) {
  return ((consumer * S::kColumnGroups + j) * 128 + threadIdx.x % 128) * 16;
}

}  // namespace detail

template <class S>
__device__ __forceinline__ void Gemm(const GemmParams& p) {
  using TIn = typename S::TIn;
  constexpr bool kSplit = S::kSplitK > 1;
  constexpr bool kMulticast = S::kMulticast > 1;
  constexpr bool kCluster = kSplit || kMulticast;
  // The stage buffers, 1024-byte aligned (the swizzle atom), the split-K partial tile, then the
  // barriers.
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - SmemAddress(smem_raw) % 1024) % 1024);
  unsigned char* smem_a = smem;
  unsigned char* smem_b = smem + S::kStages * S::kBytesA;
  unsigned char* partial = smem_b + S::kStages * S::kBytesB;
  unsigned char* staging = partial;  // the TMA-store epilogue's buffers (never with a split)
  unsigned long long* full = reinterpret_cast<unsigned long long*>(partial + (kSplit ? S::kTileM * S::kTileN * 4
                                                                              : S::kStoreStaging
                                                                                  ? S::kConsumers * kStoreStagingBytes
                                                                                  : 0));
  unsigned long long* empty = full + S::kStages;
  unsigned long long* ready = empty + S::kStages;  // split-K: the cluster's partials are written
  unsigned long long* drained = ready + 1;         // split-K: the cluster has read this block's
  unsigned long long* done = ready;                // multicast: the other block's last arrival here is made
  // grouped (never split): each group's first tile row, where split-K would keep its barriers.
  int* group_table = reinterpret_cast<int*>(empty + S::kStages);

  // Read through a shuffle so the compiler knows it is the same in every lane of a warp (uniform
  // registers for what is computed from it: the wgmma descriptors of the consumers).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    if constexpr (!S::kAGather) TmaPrefetchDescriptor(&p.a_map);
    TmaPrefetchDescriptor(&p.b_map);
    for (int s = 0; s < S::kStages; ++s) {
      BarrierInit(&full[s], S::kAGather ? 1 + S::kTileM : 1);  // gathered: a copying lane's a row
      BarrierInit(&empty[s], S::kConsumers * 4 * S::kMulticast);
    }
    if constexpr (kMulticast) BarrierInit(done, S::kConsumers * 4);
    if constexpr (kSplit) {
      // Every consumer thread of every block of the cluster arrives once per tile.
      BarrierInit(ready, S::kSplitK * S::kConsumers * 128);
      BarrierInit(drained, S::kSplitK * S::kConsumers * 128);
    }
    FenceBarrierInit();
  }
  // Launched as a programmatic dependent (KILN_GEMM_PDL=1, gemm_launch.cpp; off by default), the
  // block may start while the previous kernel on the stream runs: every thread waits for that
  // kernel's memory here, before the first global access (the group table, the TMA loads, the
  // scales, D), so only the launch and the barrier setup above overlap it; then, this grid's
  // blocks all resident, the next kernel may be launched. In plain stream order both do nothing.
  GridDependencyWait();
  if (threadIdx.x == 0) GridDependencyLaunchDependents();
  if constexpr (S::kGrouped) {
    if (threadIdx.x < 32) detail::BuildGroupTable<S>(p, group_table);
  }
  // Split-K and multicast: the other blocks arrive on this block's barriers (and multicast into
  // its stages), so they must see them initialized: the whole cluster synchronizes (before any
  // thread leaves).
  if constexpr (kCluster) {
    ClusterSync();
  } else {
    __syncthreads();
  }

  const long long tiles_m = S::kGrouped ? group_table[p.groups] : (p.m + S::kTileM - 1) / S::kTileM;
  const long long tiles_n = ((S::kSiluAndMul ? p.n / 2 : p.n) + S::kOutTileN - 1) / S::kOutTileN;
  // The work units: tiles, or with multicast pairs of tile rows x tile columns.
  const long long units_m = (tiles_m + S::kMulticast - 1) / S::kMulticast;
  const long long tiles = units_m * tiles_n;
  const int k_steps_all = static_cast<int>((p.k + S::kStageK - 1) / S::kStageK);
  // The work units are taken by clusters (a block alone is a cluster of one); this block's K steps.
  const unsigned rank = kCluster ? ClusterRank() : 0;
  const unsigned split_rank = kSplit ? rank : 0;
  const long long first_tile = kCluster ? ClusterId() : blockIdx.x;
  const long long tile_stride = kCluster ? ClusterCount() : gridDim.x;
  const int k_begin = static_cast<int>(static_cast<long long>(k_steps_all) * split_rank / S::kSplitK);
  const int k_end = static_cast<int>(static_cast<long long>(k_steps_all) * (split_rank + 1) / S::kSplitK);

  if (warp_group == 0) {
    // Producer. With two consumers the block has 384 threads (168 registers each at launch);
    // the producer needs few, the consumers' 64 x 256 fragments many.
    if constexpr (S::kConsumers == 2) ReleaseRegisters<40>();
    int stage = 0;
    unsigned phase = 0;
    if constexpr (S::kAGather) {
      // kTileM / 32 warps, each copying 32 of a tile's rows of A (lane l finds row l's source);
      // thread 0 also has TMA load B.
      const int warp = static_cast<int>(threadIdx.x / 32);
      if (warp >= S::kTileM / 32) return;
      unsigned char* my_rows = smem_a + warp * 32 * 128;
      for (long long tile = first_tile; tile < tiles; tile += tile_stride) {
        long long tm, tn;
        detail::TileOf<S>(tile, units_m, tiles_n, tm, tn);
        const detail::TileRows rows = detail::Locate<S>(p, group_table, tm, tn);
        const long long row = rows.a + threadIdx.x;  // warp w's rows are the tile's 32 w ..
        const int source = row < rows.d_end ? detail::GatheredRow(p, row) : -1;
        const int row_b = static_cast<int>(rows.b);
        for (int ks = k_begin; ks < k_end; ++ks) {
          BarrierWait(&empty[stage], phase ^ 1);
          if (threadIdx.x == 0) {
            BarrierArriveExpectTx(&full[stage], S::kBytesB);
            detail::LoadStageB<S>(p, smem_b + stage * S::kBytesB, &full[stage], ks, row_b);
          }
          detail::GatherStage<S>(p, source, my_rows + stage * S::kBytesA, static_cast<long long>(ks) * 128,
                                 &full[stage]);
          if (++stage == S::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      CpAsyncWaitAll();  // the block's shared memory outlives the copies
      return;
    }
    if (threadIdx.x != 0) return;
    for (long long tile = first_tile; tile < tiles; tile += tile_stride) {
      long long tm, tn;
      detail::TileOf<S>(tile, units_m, tiles_n, tm, tn);
      tm = tm * S::kMulticast + (kMulticast ? rank : 0u);
      const bool load_a = tm < tiles_m;  // multicast: the pair's second tile may be past M
      const detail::TileRows rows = detail::Locate<S>(p, group_table, tm, tn);
      const int row_a = static_cast<int>(rows.a);
      const int row_b = static_cast<int>(rows.b);
      for (int ks = k_begin; ks < k_end; ++ks) {
        BarrierWait(&empty[stage], phase ^ 1);  // multicast: both blocks' consumers have released it
        // Multicast: this block's part of B comes from itself, the other part from the other block.
        BarrierArriveExpectTx(&full[stage], (load_a ? S::kBytesA : 0) + S::kBytesB);
        if (load_a) TmaLoad2d(smem_a + stage * S::kBytesA, &p.a_map, &full[stage], ks * S::kStageK, row_a);
        if constexpr (kMulticast) {
          TmaLoad2dMulticast(smem_b + stage * S::kBytesB + rank * S::kBytesBPart, &p.b_map, &full[stage],
                             ks * S::kStageK, row_b + static_cast<int>(rank) * (S::kTileN / S::kMulticast),
                             static_cast<unsigned short>((1u << S::kMulticast) - 1));
        } else {
          detail::LoadStageB<S>(p, smem_b + stage * S::kBytesB, &full[stage], ks, row_b);
        }
        if (++stage == S::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  // Consumer `consumer` owns rows 64 * consumer .. + 63 of each tile.
  if constexpr (S::kConsumers == 2) ClaimRegisters<232>();
  const int consumer = warp_group - 1;
  const bool warp_leader = threadIdx.x % 32 == 0;
  // A stage read: this warp's arrival on its `empty` barrier, and with multicast on the other
  // block's too (its producer writes half of B into this block's stage).
  auto release = [&](int s) {
    if (!warp_leader) return;
    BarrierArrive(&empty[s]);
    if constexpr (kMulticast) RemoteBarrierArrive(ClusterAddress(&empty[s], rank ^ 1u));
  };
  float acc[S::kAccumulators];
#pragma unroll
  for (int i = 0; i < S::kAccumulators; ++i) acc[i] = 0.0f;
  // fp8 at 128 x 256: ping-pong (kFp8Pingpong). A consumer waits for its turn (named barrier
  // kTurnBarrier + consumer) before it issues a batch of wgmmas (a 128-column half of a K block)
  // and passes the turn to the other (kTurnBarrier + 1 - consumer) once they are issued, so the
  // tensor cores run one consumer's half while the other promotes its last one into the fp32
  // accumulators. Both issue the same batches (the same tiles and K blocks); consumer 1 lets
  // consumer 0 go first, and consumer 0 takes the one arrival left over at the end. Measured on
  // an H100 (bench/results/2026-12-06-h100-fp8-pingpong.md): fp8_gemm 0.2-6.5 % faster at
  // 128 x 256 from M 1024 (2.4 % over the issue's shapes from M 4096); 2-8 % slower at 128 x 128
  // (one batch a K block) and within +-1.6 % on the grouped ops, so only the dense 256-wide tile.
  constexpr bool kFp8Pingpong = S::kFp8 && !S::kGrouped && S::kConsumers == 2 && S::kTileN == 256;
  if constexpr (kFp8Pingpong) {
    if (consumer == 1) NamedBarrierArrive(kTurnBarrier, 256);
  }
  int stage = 0;
  unsigned phase = 0;
  unsigned tiles_done = 0;  // split-K: the parity of `ready` and `drained`
  for (long long tile = first_tile; tile < tiles; tile += tile_stride) {
    long long tm, tn;
    detail::TileOf<S>(tile, units_m, tiles_n, tm, tn);
    tm = tm * S::kMulticast + (kMulticast ? rank : 0u);
    const detail::TileRows rows = detail::Locate<S>(p, group_table, tm, tn);
    int previous = -1;
    if constexpr (S::kFp8) {
      // Block-scaled fp8: each stage is one 128-wide block of K. Its product goes to `block`
      // (scale-d 0 on the first wgmma: no zeroing), and once the wgmmas are done it is
      // promoted into the fp32 accumulators times the block's scales: acc += block * sa[row] *
      // sb. The tensor cores add fp8 products at reduced precision inside one instruction
      // chain; promoting every 128 of K (4 k32 wgmmas) keeps the error of a bf16 GEMM
      // (docs/kernels-gemm.md). A tile wider than 128 columns is done in 128-column halves
      // through the one block register set (each half has its own B scale block), so the
      // accumulators of 256 columns and one block fit in a consumer's registers; a 192-wide tile
      // in 64-column thirds (a third inside one 128-column scale block of B).
      constexpr int kBlockN = S::kTileN <= kFp8ScaleBlock       ? S::kTileN
                              : S::kTileN % kFp8ScaleBlock == 0 ? kFp8ScaleBlock
                                                                : kFp8ScaleBlock / 2;
      constexpr int kHalves = S::kTileN / kBlockN;
      constexpr int kBlockGroups = kBlockN / 8;  // column groups of 4 accumulators in a block
      // a_scales has a row per row of A (grouped: of all groups); b_scales ceil(N / 128) rows per
      // group (rows.b is group * N + the tile's first column).
      const long long row_base = detail::FragmentRow(rows.a + consumer * kRowsPerConsumer);
      const long long group = S::kGrouped ? rows.b / p.n : 0;
      const long long col_base = rows.b - group * p.n;
      const long long b_scale_base = group * Fp8ScaleBlocks(p.n);
      float block[kBlockN / 2];
#pragma unroll
      for (int i = 0; i < S::kAccumulators; ++i) acc[i] = 0.0f;
      // This tile's scale rows, found once, as 32-bit element offsets (the plan refuses scales
      // that span 2^31 elements). A row or column past the matrix reads the last one's scale
      // instead of a bounds test in the loop: its products are never stored, and an output
      // element depends only on its own row's and column's scales.
      const long long last_row = p.m - 1;
      long long scale_row0 = row_base < last_row ? row_base : last_row;
      long long scale_row1 = row_base + 8 < last_row ? row_base + 8 : last_row;
      if constexpr (S::kAGather) {  // a's rows, by the same map (a bad entry: row 0, its products zeros)
        const int from0 = detail::GatheredRow(p, scale_row0), from1 = detail::GatheredRow(p, scale_row1);
        scale_row0 = from0 < 0 ? 0 : from0;
        scale_row1 = from1 < 0 ? 0 : from1;
      }
      const int a_scale0 = static_cast<int>(scale_row0 * p.a_scale_stride);
      const int a_scale1 = static_cast<int>(scale_row1 * p.a_scale_stride);
      int b_scale[kHalves];
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        // silu_and_mul: the up half's rows start n / 2 further (a multiple of 128: plan-checked).
        const long long col = col_base + (S::kSiluAndMul ? h * (p.n / 2) : h * kBlockN);
        const long long block_col = (col < p.n ? col : p.n - 1) / kFp8ScaleBlock;
        b_scale[h] = static_cast<int>((b_scale_base + block_col) * p.b_scale_stride);
      }
      // A K block's scales are read one block ahead: ptxas may place their products before the
      // block's wgmmas, which would then wait for the loads, and where a tile's scale rows do not
      // fit the L1 left beside the stages (K 14336: 448 bytes a row) that wait is an L2 latency.
      float sa0 = 0.0f, sa1 = 0.0f, sb[kHalves];
#pragma unroll
      for (int h = 0; h < kHalves; ++h) sb[h] = 0.0f;
      if (k_begin < k_end) {  // a split-K block may have no K blocks: nothing to read
        sa0 = p.a_scales[a_scale0 + k_begin];
        sa1 = p.a_scales[a_scale1 + k_begin];
#pragma unroll
        for (int h = 0; h < kHalves; ++h) sb[h] = p.b_scales[b_scale[h] + k_begin];
      }
      for (int ks = k_begin; ks < k_end; ++ks) {
        // The next block's scales (the last block reads its own again: nothing past the row).
        const int k_next = ks + 1 < k_end ? ks + 1 : ks;
        const float next_sa0 = p.a_scales[a_scale0 + k_next];
        const float next_sa1 = p.a_scales[a_scale1 + k_next];
        float next_sb[kHalves];
#pragma unroll
        for (int h = 0; h < kHalves; ++h) next_sb[h] = p.b_scales[b_scale[h] + k_next];
        BarrierWait(&full[stage], phase);
        if constexpr (S::kAGather) FenceProxyAsyncShared();  // cp.async's writes, for wgmma's reads
        const unsigned long long a_desc = SwizzledKMajorDescriptor(smem_a + stage * S::kBytesA +
                                                                   consumer * kRowsPerConsumer * 128);
        const unsigned long long b_desc = SwizzledKMajorDescriptor(smem_b + stage * S::kBytesB);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
          FenceAccumulators(block);
          if constexpr (kFp8Pingpong) NamedBarrierSync(kTurnBarrier + consumer, 256);
          WgmmaFence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            // B's rows h * 128 onwards start h * 128 rows of 128 bytes in: a whole number of
            // swizzle atoms (8 rows), so the descriptor just moves.
            Wgmma<TIn, kBlockN>::Mma(block, DescriptorPlus(a_desc, kk * 32),
                                     DescriptorPlus(b_desc, h * kBlockN * 128 + kk * 32), kk > 0);
          }
          WgmmaCommit();
          if constexpr (kFp8Pingpong) NamedBarrierArrive(kTurnBarrier + 1 - consumer, 256);
          WgmmaWait<0>();
          FenceAccumulators(block);
          if (h == kHalves - 1) release(stage);
          const float s0 = sa0 * sb[h], s1 = sa1 * sb[h];
#pragma unroll
          for (int j = 0; j < kBlockGroups; ++j) {
            float* out = acc + 4 * (h * kBlockGroups + j);
            out[0] = fmaf(block[4 * j], s0, out[0]);
            out[1] = fmaf(block[4 * j + 1], s0, out[1]);
            out[2] = fmaf(block[4 * j + 2], s1, out[2]);
            out[3] = fmaf(block[4 * j + 3], s1, out[3]);
          }
        }
        sa0 = next_sa0;
        sa1 = next_sa1;
#pragma unroll
        for (int h = 0; h < kHalves; ++h) sb[h] = next_sb[h];
        if (++stage == S::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    } else {
      for (int ks = k_begin; ks < k_end; ++ks) {
        BarrierWait(&full[stage], phase);
        if constexpr (S::kAGather) FenceProxyAsyncShared();  // cp.async's writes, for wgmma's reads
        const unsigned long long a_desc = SwizzledKMajorDescriptor(smem_a + stage * S::kBytesA +
                                                                   consumer * kRowsPerConsumer * kTileK * 2);
        const unsigned long long b_desc = SwizzledKMajorDescriptor(smem_b + stage * S::kBytesB);
        FenceAccumulators(acc);
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk) {
          Wgmma<TIn, S::kTileN>::Mma(acc, DescriptorPlus(a_desc, kk * 32), DescriptorPlus(b_desc, kk * 32),
                                     ks > k_begin || kk > 0);
        }
        WgmmaCommit();
        FenceAccumulators(acc);
        // The group before this one has finished reading its stage: hand that stage back.
        WgmmaWait<1>();
        if (previous >= 0) release(previous);
        previous = stage;
        if (++stage == S::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);
    if (previous >= 0) release(previous);
    const long long row0 = rows.a + consumer * kRowsPerConsumer;
    if constexpr (!kSplit) {
      // Staged when the launch set d_store and, grouped, this consumer's 64 rows are all the
      // group's (every tile of a group but its last, partial one); else from registers.
      bool staged = false;
      if constexpr (S::kStagedStores) {
        if (p.d_store != 0 && (!S::kGrouped || row0 + kRowsPerConsumer <= rows.d_end)) {
          detail::StagedEpilogue<S>(p, acc, staging + consumer * kStoreStagingBytes, row0, tn * S::kOutTileN, consumer);
          staged = true;
        }
      }
      if (!staged) {
        if constexpr (S::kE4m3Out) {
          detail::SiluAndMulE4m3Epilogue<S>(p, acc, row0, tn * S::kOutTileN, rows.d_end);
        } else if constexpr (S::kSiluAndMul) {
          detail::SiluAndMulEpilogue<S>(p, acc, row0, tn * S::kOutTileN, rows.d_end);
        } else {
          detail::Epilogue<S>(p, acc, row0, tn * S::kTileN, rows.d_end);
        }
      }
    } else {
      // A block with no K steps (K shorter than the cluster) adds zeros.
      if (k_begin == k_end) {
#pragma unroll
        for (int i = 0; i < S::kAccumulators; ++i) acc[i] = 0.0f;
      }
      const long long row_base = detail::FragmentRow(row0);
      // Rows past M (most of them when M is small) are neither written nor read.
      const bool live = row_base < rows.d_end;
      if (tiles_done > 0) ClusterBarrierWait(drained, (tiles_done - 1) & 1);
      if (live) {
#pragma unroll
        for (int j = 0; j < S::kColumnGroups; ++j)
          *reinterpret_cast<float4*>(partial + detail::PartialOffset<S>(consumer, j)) = make_float4(
              acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
      }
#pragma unroll
      for (int q = 0; q < S::kSplitK; ++q) ClusterBarrierArrive(ClusterAddress(ready, q));
      ClusterBarrierWait(ready, tiles_done & 1);
      if (live) {
        const long long col_base = detail::FragmentColumn(tn * S::kTileN);
        constexpr int kShare = S::kColumnGroups / S::kSplitK;
#pragma unroll
        for (int jj = 0; jj < kShare; ++jj) {
          const int j = static_cast<int>(rank) * kShare + jj;
          float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < S::kSplitK; ++q) {
            // Block q's partial buffer (mapa of this block's), at the same offset.
            const float4 x = ClusterLoad4(ClusterAddress(partial, q) + detail::PartialOffset<S>(consumer, j));
            v[0] += x.x;
            v[1] += x.y;
            v[2] += x.z;
            v[3] += x.w;
          }
          detail::StoreGroup<S>(p, v, row_base, col_base, j, rows.d_end);
        }
      }
#pragma unroll
      for (int q = 0; q < S::kSplitK; ++q) ClusterBarrierArrive(ClusterAddress(drained, q));
      ++tiles_done;
    }
  }
  if constexpr (kFp8Pingpong) {
    if (consumer == 0) NamedBarrierSync(kTurnBarrier, 256);  // consumer 1's last pass
  }
  // Split-K: the other blocks may still be reading this block's partials.
  if constexpr (kSplit) {
    if (tiles_done > 0) ClusterBarrierWait(drained, (tiles_done - 1) & 1);
  }
  // TMA-store epilogue: this warp-group's last stores have written D before the block ends.
  if constexpr (S::kStagedStores) {
    if (p.d_store != 0 && threadIdx.x % 128 == 0) BulkWait<0>();
  }
  // Multicast: the other block's consumers arrive on this block's `empty` barriers up to their
  // last stage; this block's shared memory must outlive those arrivals. Each consumer warp says
  // it has made its last one (released to the cluster, after them), and waits for the other
  // block's warps to say the same.
  if constexpr (kMulticast) {
    if (warp_leader) ClusterBarrierArrive(ClusterAddress(done, rank ^ 1u));
    ClusterBarrierWait(done, 0);
  }
}

}  // namespace gemm
}  // namespace kiln
