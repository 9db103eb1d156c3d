// KeyInputsFor: the one place that decides what enters a kernel's cache key.
//
// The key is a SHA-256 over cache::CanonicalEncoding of these inputs, so a cached cubin is
// served only to a request that would compile to the same bytes. What enters, and why:
//   op, uri, params       which specialization: two specs never share a key;
//   sources               name and SHA-256 of every header, then every unit, of the spec, in
//                         spec order: the exact bytes NVRTC is handed (they come from memory);
//   kernels_tree_digest   every file of kernels/include and kernels/src, a superset of what one
//                         spec can include: editing any device header recompiles, never serves
//                         a stale cubin;
//   options               what changes the output (the spec's NVRTC options, -lineinfo, -G, and
//                         the verbose-log mark: see KernelEngine::PrepareUncached); never an
//                         include path, so a moved warm cache stays warm;
//   link_options, entries what nvJitLink links and which kernels the cubin must export;
//   arch                  the arch compiled for ("sm_90a"), after the arch context resolved it;
//   nvrtc, nvjitlink, cuda_headers, kiln versions
//                         a toolkit or Kiln upgrade must not serve a cubin the old one built.
// The cache format version is cache::KeyInputs' own default. Changing what this function puts
// in (or its order) changes every key: every warm cache misses once.
#pragma once

#include <string>
#include <vector>

#include "cache/cache_key.h"
#include "kernels/jit/arch.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "server/jit/toolchain.h"

namespace kiln::server {

// The key inputs of `spec` compiled for `arch` against `tree` with `key_options` (the options
// that change the output, as NvrtcCompiler::KeyOptions plus the debug marks). Hashes every
// source once; inputs.sources[i].sha256 is the hash of the i-th of spec.headers then spec.units.
cache::KeyInputs KeyInputsFor(const kernels::JitSpec& spec, const kernels::TreeSnapshot& tree,
                              const std::vector<std::string>& key_options, const kernels::GpuArch& arch,
                              const Toolchain& toolchain);

}  // namespace kiln::server
