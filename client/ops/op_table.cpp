#include "client/ops/op_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::client {
namespace {

// Filled during static initialization by KILN_REGISTER_OP (function-local: other translation
// units may register before anything of this one runs); sorted on first read.
std::vector<const OpDescriptor*>& Table() {
  static auto* table = new std::vector<const OpDescriptor*>();
  return *table;
}

}  // namespace

bool RegisterOp(const OpDescriptor* op) {
  for (const OpDescriptor* known : Table()) {
    if (std::strcmp(known->name, op->name) == 0) {
      std::fprintf(stderr, "kiln: two ops are named '%s' in the op table\n", op->name);
      std::abort();
    }
  }
  Table().push_back(op);
  return true;
}

const std::vector<const OpDescriptor*>& AllOps() {
  static const std::vector<const OpDescriptor*>* sorted = [] {
    auto* ops = new std::vector<const OpDescriptor*>(Table());
    std::sort(ops->begin(), ops->end(),
              [](const OpDescriptor* a, const OpDescriptor* b) { return std::strcmp(a->name, b->name) < 0; });
    return ops;
  }();
  return *sorted;
}

const OpDescriptor* FindOp(std::string_view name) {
  for (const OpDescriptor* op : AllOps())
    if (name == op->name) return op;
  return nullptr;
}

}  // namespace kiln::client
