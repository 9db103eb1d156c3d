#include "proto/origin_word.h"

namespace kiln::proto {

std::string OriginWord(v1::Origin origin) {
  switch (origin) {
    case v1::ORIGIN_MEMORY: return "memory";
    case v1::ORIGIN_DISK: return "disk";
    case v1::ORIGIN_PREBUILT: return "prebuilt";
    case v1::ORIGIN_REPOSITORY: return "repository";
    case v1::ORIGIN_REMOTE: return "remote";
    case v1::ORIGIN_COMPILED: return "compiled";
    default: return "unspecified";
  }
}

}  // namespace kiln::proto
