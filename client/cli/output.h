// How `kiln` prints: replies as JSON the way grpcurl does (protobuf JSON names), and human
// forms of sizes, durations, times and tables.
#pragma once

#include "kiln/v1/kernel.pb.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <google/protobuf/map.h>

namespace google::protobuf {
class Message;
class Timestamp;
}  // namespace google::protobuf

namespace kiln::cli {

// Indented JSON (json names, enums by name, default values left out), like grpcurl.
std::string ToJson(const google::protobuf::Message& message);
// One line (for streams of events: one JSON object per line).
std::string ToJsonLine(const google::protobuf::Message& message);

std::string HumanBytes(uint64_t bytes);                       // "9.4 KiB"
std::string HumanMs(double ms);                               // "850 µs", "12.3 ms", "1.25 s"
std::string HumanTime(const google::protobuf::Timestamp& t);  // local "2025-11-29 17:02:11", "-"

// "block=128 rows_per_block=1" (sorted by key), "-" when empty.
std::string MapText(const google::protobuf::Map<std::string, std::string>& map);

// "kiln_rmsnorm block=128 items_per_block=4; ..." per entry (zero fields but block left out),
// "-" when there are none.
std::string LaunchText(const google::protobuf::RepeatedPtrField<v1::EntryLaunch>& launch);

// Columns padded to their widest cell; the first row is the header.
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

}  // namespace kiln::cli
