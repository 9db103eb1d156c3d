// Programmatic dependent launch from the device side (PTX ISA 9.0, "Parallel Synchronization and
// Communication Instructions: griddepcontrol", sm_90+). A kernel launched with programmatic stream
// serialization (LaunchConfig::programmatic_dependent_launch) may start while the kernel before it
// on the stream is still running: it must call GridDependencyWait before it touches anything that
// kernel (or one before it) writes or reads. Below sm_90 (the portable families' sm_80 builds)
// both are empty: there the launch is never programmatic, so the stream has already ordered the
// grid after its predecessors.
#pragma once

namespace kiln {

// Waits until the kernels this grid depends on (launched before it on the stream) have completed
// and their memory operations are visible. Without a programmatic dependent launch it returns at
// once: the stream already ordered the grid after them.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream (launched with programmatic stream serialization) be
// scheduled once every block of this grid has executed it or exited; the first execution in a
// block counts, repeats do nothing. It says nothing about this grid's memory: the dependent waits.
__device__ __forceinline__ void GridDependencyLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of a kernel whose op launches it as a programmatic dependent
// (client/core/loader/programmatic_launch.h, OpKernels::Entry::waits_first): wait for the kernels
// before it, then let the next one be scheduled at once. The next kernel waits for this grid's
// completion before it touches memory, so releasing it early is safe; it lets its launch and
// its blocks' start overlap this grid's work (a single-pass memory-bound kernel has no later
// point where that would be cheaper).
__device__ __forceinline__ void GridDependencyBegin() {
  GridDependencyWait();
  GridDependencyLaunchDependents();
}

}  // namespace kiln
