// KeyInputsFor: a request's spec, arch, tree and toolchain as cache key inputs.
#include "server/engine/key_inputs.h"

#include "cache/sha256.h"

namespace kiln::server {

cache::KeyInputs KeyInputsFor(const kernels::JitSpec& spec, const kernels::TreeSnapshot& tree,
                              const std::vector<std::string>& key_options, const kernels::GpuArch& arch,
                              const Toolchain& toolchain) {
  cache::KeyInputs in;
  in.op = spec.op;
  in.uri = spec.uri;
  in.params = spec.params;
  for (const auto* list : {&spec.headers, &spec.units}) {
    for (const auto& f : *list) in.sources.push_back({f.name, cache::Sha256Hex(f.content)});
  }
  in.kernels_tree_digest = tree.digest;
  in.options = key_options;
  in.link_options = spec.link_options;
  in.entries = spec.entries;
  in.arch = arch.str();
  in.nvrtc_version = toolchain.nvrtc;
  in.nvjitlink_version = toolchain.nvjitlink;
  in.cuda_headers_version = toolchain.cuda_headers;
  in.kiln_version = toolchain.kiln;
  return in;
}

}  // namespace kiln::server
