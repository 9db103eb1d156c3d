#include "bench/op/default_list.h"

#include "bench/op/test_list.h"
#include "client/core/api/invalid_argument.h"

namespace kiln::bench {

std::string GenerateDefaultList(const std::vector<traces::TraceDefinition>& definitions) {
  std::string out = "# kiln-bench's default cases, generated from the examples of kernels/traces/*.json\n"
                    "# (kiln-bench --traces kernels/traces runs them; --generate-list prints them). To change\n"
                    "# them, change the examples: this text is derived, never kept.\n"
                    "#\n"
                    "# routine              dtype shape                            backends         label\n";
  for (const auto& def : definitions) {
    // No examples: nothing to measure (an internal op's definition); not even its name, so
    // such a definition never changes the list.
    if (def.examples.empty()) continue;
    out += "\n# " + def.name + " (" + def.api_cpp + ")";
    if (def.HasTag("multi_gpu")) {
      out += ": multi-GPU, not run by kiln-bench (see bench/comm/compare_nccl.py)\n";
      continue;
    }
    out += "\n";
    for (const auto& example : def.examples) {
      BenchCase c;
      c.routine = def.name;
      c.dtype = example.dtype;
      c.shape = example.axes;
      c.backends = {"kiln", "reference"};
      c.label = example.name;
      out += FormatCase(c) + "\n";
    }
  }
  return out;
}

StatusOr<std::string> GenerateDefaultListFromDir(const std::string& traces_dir) {
  auto definitions = traces::LoadTraceDefinitions(traces_dir);
  if (!definitions.ok()) return client::InvalidArgument(std::string(definitions.status().message()));
  return GenerateDefaultList(*definitions);
}

}  // namespace kiln::bench
