#include "client/comm/peer_check.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/devices.h"

namespace kiln::client::comm {
namespace {

std::string UuidText(const CUuuid& uuid) {
  std::string text;
  char byte[3];
  for (unsigned char c : uuid.bytes) {
    std::snprintf(byte, sizeof(byte), "%02x", c);
    text += byte;
  }
  return text;
}

struct RankInfo {
  std::string uuid;
  int device = -1;
  long pid = 0;
  size_t buffer_bytes = 0;
};

}  // namespace

Status CheckPeers(const CudaDriver& driver, int device, size_t buffer_bytes, Rendezvous& rendezvous,
                  std::chrono::milliseconds timeout) {
  CUdevice handle = 0;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGet(&handle, device), "cuDeviceGet"));
  CUuuid uuid = {};
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGetUuid(&uuid, handle), "cuDeviceGetUuid"));
  std::ostringstream payload;
  payload << UuidText(uuid) << ' ' << device << ' ' << static_cast<long>(getpid()) << ' ' << buffer_bytes;
  auto gathered = rendezvous.AllGather(payload.str(), {}, timeout);
  if (!gathered.ok()) return gathered.status().WithContext("exchanging device identities");

  std::vector<RankInfo> ranks;
  for (const PeerContribution& c : *gathered) {
    for (int fd : c.fds) close(fd);
    std::istringstream in(c.payload);
    RankInfo info;
    if (!(in >> info.uuid >> info.device >> info.pid >> info.buffer_bytes))
      return Status(StatusCode::kInternal, "rank " + std::to_string(c.rank) + " sent a malformed identity '" +
                                               c.payload + "' (a different Kiln version?)");
    ranks.push_back(info);
  }

  const int me = rendezvous.rank();
  KILN_ASSIGN_OR_RETURN(auto count, DeviceCount(driver));
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankInfo& peer = ranks[static_cast<size_t>(r)];
    if (peer.buffer_bytes != buffer_bytes)
      return InvalidArgument("rank " + std::to_string(r) + " asked for a " + std::to_string(peer.buffer_bytes) +
                             "-byte buffer, rank " + std::to_string(me) + " for " + std::to_string(buffer_bytes) +
                             "; every rank must pass the same CommOptions::buffer_bytes");
    if (r == me) continue;
    if (peer.uuid == UuidText(uuid))
      return InvalidArgument("ranks " + std::to_string(std::min(r, me)) + " and " + std::to_string(std::max(r, me)) +
                             " (pids " + std::to_string(ranks[static_cast<size_t>(std::min(r, me))].pid) + ", " +
                             std::to_string(ranks[static_cast<size_t>(std::max(r, me))].pid) + ") both drive GPU " +
                             peer.uuid +
                             "; each rank needs its own GPU (kiln-launch gives rank i the device "
                             "KILN_LOCAL_RANK = i)");
    // Where this process sees the peer's GPU too, it must be able to reach its memory.
    for (int d = 0; d < count; ++d) {
      CUdevice other = 0;
      CUuuid other_uuid = {};
      if (driver.cuDeviceGet(&other, d) != CUDA_SUCCESS || driver.cuDeviceGetUuid(&other_uuid, other) != CUDA_SUCCESS ||
          UuidText(other_uuid) != peer.uuid)
        continue;
      int can_access = 0;
      KILN_RETURN_IF_ERROR(
          driver.Check(driver.cuDeviceCanAccessPeer(&can_access, handle, other), "cuDeviceCanAccessPeer"));
      if (!can_access)
        return Status(StatusCode::kFailedPrecondition,
                      "cuda:" + std::to_string(device) + " (rank " + std::to_string(me) +
                          ") cannot access the memory of cuda:" + std::to_string(d) + " (rank " + std::to_string(r) +
                          "): the all-reduce needs peer-to-peer access (NVLink or PCIe P2P)");
    }
  }
  return OkStatus();
}

}  // namespace kiln::client::comm
