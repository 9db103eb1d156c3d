// What every rank of the multi-GPU tests shares: its GPU (device = KILN_LOCAL_RANK, primary
// context current), the communicator made from kiln-launch's environment (kilnd is the one the
// outer test started: KILN_SOCKET), and inputs every rank can regenerate for every other rank,
// so each computes the expected sum on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/comm.h"
#include "tests/support/gpu_harness.h"

namespace kiln::testing {

struct RankSession {
  int rank = 0;
  int world = 1;
  int device = 0;
  CUcontext context = nullptr;
  std::unique_ptr<comm::Communicator> comm;
};

// Created on first use. KILN_TEST_COMM_BUFFER_MB (default 8) sets the staging buffer, small so
// that moderate messages already go in pieces.
RankSession& Session();

// Element i of rank r's input of test case `seed`: uniform in [-2, 2), rounded to the dtype.
// The same on every rank (a hash, not a stream), and fast enough for 64 Mi elements.
HostTensor RankInput(DType dtype, size_t count, uint64_t seed, int rank);

// v rounded to the dtype (round to nearest even), as a float.
float RoundTo(DType dtype, float v);

// Copies `count` elements of `host` to `device` (bytes at data()).
void Upload(char* device, const HostTensor& host);
HostTensor Download(DType dtype, const char* device, size_t count);

// Checks `got` against the exact result of the kernels' arithmetic (an fp32 sum over ranks in
// rank order, rounded once: so every rank holds the same bits) and against the float64 sum
// within the dtype's tolerance; fails with the first few differences.
void ExpectAllReduced(const HostTensor& got, DType dtype, uint64_t seed, int world, const char* what);

}  // namespace kiln::testing
