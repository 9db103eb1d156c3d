// The one-shot / two-shot crossover of Communicator::AllReduce (kiln/comm.h, docs/comm.md).
#include "kiln/comm.h"

namespace kiln::comm {

size_t OneShotMaxBytes(int world_size) {
  // One-shot sends (W-1)·n bytes from each rank and takes two barriers; two-shot sends
  // 2(W-1)/W·n and takes three. Two ranks send the same bytes either way; measured on two
  // H200s (bf16, bench/results/2026-11-29-all-reduce-h200x2.md): one-shot is faster up to
  // 2 MiB (14.3 vs 14.8 us), they tie at 4 MiB, two-shot wins from 8 MiB (34.5 vs 36.9 us)
  // and keeps ~290 GB/s where one-shot stays at ~221. Wider worlds are not measured: the
  // values below scale the crossover down with the extra bytes one-shot sends.
  if (world_size <= 2) return size_t{2} << 20;
  if (world_size <= 4) return size_t{512} << 10;
  return size_t{256} << 10;
}

AllReduceAlgorithm ChooseAllReduceAlgorithm(size_t bytes, int world_size) {
  return bytes <= OneShotMaxBytes(world_size) ? AllReduceAlgorithm::kOneShot : AllReduceAlgorithm::kTwoShot;
}

}  // namespace kiln::comm
