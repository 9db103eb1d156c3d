// The one-shot / two-shot crossover of Communicator::AllReduce (kiln/comm.h, docs/comm.md).
#include "kiln/comm.h"

namespace kiln::comm {

size_t OneShotMaxBytes(int world_size) {
  // One-shot moves (W-1)·n bytes into each rank and takes two barriers; two-shot moves
  // 2(W-1)/W·n and takes three. Two ranks move the same bytes either way, so only the extra
  // barrier differs. Measured on two H200s: see docs/comm.md (bench/results/).
  if (world_size <= 2) return size_t{1} << 20;
  if (world_size <= 4) return size_t{512} << 10;
  return size_t{256} << 10;
}

AllReduceAlgorithm ChooseAllReduceAlgorithm(size_t bytes, int world_size) {
  return bytes <= OneShotMaxBytes(world_size) ? AllReduceAlgorithm::kOneShot
                                              : AllReduceAlgorithm::kTwoShot;
}

}  // namespace kiln::comm
