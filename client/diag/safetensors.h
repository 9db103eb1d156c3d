// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "BF16", "shape": [7, 4096], "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, padded with spaces to a multiple of 8, then the tensors'
// bytes, dense and row-major, back to back. Any safetensors reader (or a few lines of Python
// with json and struct) reads Kiln's dumps; what safetensors cannot say (a tensor's original
// strides, pointer, device and role) goes into __metadata__ as "<name>.strides" and so on.
//
// The writer streams: the header first, then each tensor's bytes in entry order, so a dump
// never holds more than one tensor in memory. It writes "<path>.tmp" and renames it over
// <path> after an fsync, so a reader sees a whole file or none.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::diag {

const char* SafetensorsDType(DType dtype);  // "F32", "F16", "BF16", "I8", "U8", "I32", "I64"
std::optional<DType> DTypeFromSafetensors(const std::string& name);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  size_t Bytes() const;
};

class SafetensorsWriter {
 public:
  // Writes the header of `entries` to <path>.tmp.
  static StatusOr<SafetensorsWriter> Create(const std::string& path, std::vector<SafetensorsEntry> entries,
                                            const std::map<std::string, std::string>& metadata);
  SafetensorsWriter(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) = delete;
  ~SafetensorsWriter();  // removes the temp file unless committed

  // The next entry's bytes (exactly its size).
  Status Append(const std::vector<uint8_t>& bytes);
  // After every entry: fsync, rename to `path`.
  Status Commit();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  size_t next_ = 0;
  int fd_ = -1;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensor> tensors;  // in the order of their data
  const SafetensorsTensor* Find(const std::string& name) const;
};

// Reads and checks a whole file: header size, JSON, known dtypes, shapes matching their byte
// ranges, ranges inside the file and not overlapping. DATA_LOSS naming the problem otherwise.
StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace kiln::client::diag
