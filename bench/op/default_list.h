// The default cases of kiln-bench (kiln-bench --traces kernels/traces), generated from the trace
// definitions' examples whenever they are needed (never kept in a file of their own): one case
// per example, backends "kiln,reference", labelled with the example's name. Ops tagged "multi_gpu" appear as a comment
// only (kiln-bench drives one GPU; bench/comm/compare_nccl.py measures them); a definition without examples is left
// out. Deterministic: the same traces give the same bytes.
#pragma once

#include <string>
#include <vector>

#include "kernels/traces/trace_definition.h"
#include "kiln/status.h"

namespace kiln::bench {

std::string GenerateDefaultList(const std::vector<traces::TraceDefinition>& definitions);

// Loads every definition of `traces_dir` (each checked against the schema) and generates.
StatusOr<std::string> GenerateDefaultListFromDir(const std::string& traces_dir);

}  // namespace kiln::bench
