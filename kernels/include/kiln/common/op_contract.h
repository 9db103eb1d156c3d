// What every op contract shares. An op contract (kiln/<family>/<family>_contract.h) is the one
// typed description of an op family that its device code, its generator (kernels/ops) and the
// client (client/ops) all include: op and entry names, param keys, limits, the kernel
// parameter struct passed by value, and what the generator's launch hints mean for its entries.
// So a contract is plain C++ that g++ and NVRTC both accept: no includes, no CUDA-only types,
// 64-bit pointers and `long long` for 64-bit integers (the same layout on host and device).
//
// The launch hints (EntryLaunch in kernels/jit/jit_spec.h, the proto's EntryLaunch on the wire,
// kiln::EntryLaunch in the client) are the same fields for every op: block, dynamic shared
// memory, `items_per_block` (how much work one block covers, in the unit the family's contract
// names: rows, columns, tokens, query heads) and `max_blocks` (a cap on grid.x, 0: none). The
// daemon sends them with each cubin because its kernels tree, not the client's build, decided
// them.
#pragma once

namespace kiln {

// A function of a contract (a launch rule the host and the device code share): host and device
// under a CUDA compiler (NVRTC accepts no plain host function), plain constexpr elsewhere.
#if defined(__CUDACC__)
#define KILN_CONTRACT_FUNCTION __host__ __device__ constexpr
#else
#define KILN_CONTRACT_FUNCTION constexpr
#endif

// Param keys that many ops share.
constexpr const char* kParamDType = "dtype";  // element type of the op's tensors
constexpr const char* kParamVec = "vec";      // elements per vector access

// The widest vector access of every kernel: one 16-byte load or store.
constexpr int kMaxVectorBytes = 16;

static_assert(sizeof(void*) == 8 && sizeof(long long) == 8, "the op contracts assume 64-bit pointers and integers");

}  // namespace kiln
