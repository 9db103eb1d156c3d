#include "kernels/jit/jit_spec.h"

namespace kiln::kernels {

const char* OriginName(SourceFile::Origin origin) {
  switch (origin) {
    case SourceFile::Origin::kGenerated: return "generated";
    case SourceFile::Origin::kKernels: return "kernels";
    case SourceFile::Origin::kRequest: return "request";
  }
  return "unknown";
}

}  // namespace kiln::kernels
