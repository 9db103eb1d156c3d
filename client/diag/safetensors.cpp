#include "client/diag/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "client/core/api/invalid_argument.h"

namespace kiln::client::diag {
namespace {

Status Errno(const std::string& what) { return Status(StatusCode::kInternal, what + ": " + std::strerror(errno)); }

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("writing " + path);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status Corrupt(const std::string& path, const std::string& what) {
  return Status(StatusCode::kDataLoss, path + " is not a valid safetensors file: " + what);
}

}  // namespace

const char* SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kFloat16: return "F16";
    case DType::kBFloat16: return "BF16";
    case DType::kInt8: return "I8";
    case DType::kUInt8: return "U8";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kFloat8E4M3: return "F8_E4M3";
  }
  return "UNKNOWN";
}

std::optional<DType> DTypeFromSafetensors(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8, DType::kInt32,
                  DType::kInt64, DType::kFloat8E4M3})
    if (name == SafetensorsDType(d)) return d;
  return std::nullopt;
}

size_t SafetensorsEntry::Bytes() const {
  size_t n = DTypeSize(dtype);
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  return n;
}

StatusOr<SafetensorsWriter> SafetensorsWriter::Create(const std::string& path, std::vector<SafetensorsEntry> entries,
                                                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& e : entries) {
    if (e.name == "__metadata__" || header.contains(e.name))
      return InvalidArgument("safetensors: tensor name '" + e.name + "' is reserved or repeated");
    const size_t bytes = e.Bytes();
    header[e.name] = {
        {"dtype", SafetensorsDType(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t size = text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(size >> (8 * i));  // little-endian

  SafetensorsWriter w;
  w.path_ = path;
  w.entries_ = std::move(entries);
  const std::string tmp = path + ".tmp";
  w.fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (w.fd_ < 0) return Errno("creating " + tmp);
  KILN_RETURN_IF_ERROR(WriteAll(w.fd_, length, 8, tmp));
  KILN_RETURN_IF_ERROR(WriteAll(w.fd_, text.data(), text.size(), tmp));
  return w;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& other) noexcept
    : path_(std::move(other.path_)), entries_(std::move(other.entries_)), next_(other.next_), fd_(other.fd_) {
  other.fd_ = -1;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink((path_ + ".tmp").c_str());
  }
}

Status SafetensorsWriter::Append(const std::vector<uint8_t>& bytes) {
  if (fd_ < 0 || next_ >= entries_.size())
    return Status(StatusCode::kInternal, "safetensors: more tensors appended than declared for " + path_);
  const SafetensorsEntry& e = entries_[next_];
  if (bytes.size() != e.Bytes())
    return Status(StatusCode::kInternal, "safetensors: " + e.name + " has " + std::to_string(bytes.size()) +
                                             " bytes, its header says " + std::to_string(e.Bytes()));
  ++next_;
  return WriteAll(fd_, bytes.data(), bytes.size(), path_ + ".tmp");
}

Status SafetensorsWriter::Commit() {
  if (fd_ < 0) return Status(StatusCode::kInternal, "safetensors: " + path_ + " was already committed");
  if (next_ != entries_.size())
    return Status(StatusCode::kInternal, "safetensors: " + std::to_string(entries_.size() - next_) + " tensors of " +
                                             path_ + " were never written");
  const std::string tmp = path_ + ".tmp";
  if (::fsync(fd_) != 0) return Errno("fsync " + tmp);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const Status s = Errno("renaming " + tmp + " to " + path_);
    ::unlink(tmp.c_str());
    return s;
  }
  return OkStatus();
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, "cannot open " + path + ": " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char length[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(length), 8)) return Corrupt(path, "shorter than 8 bytes");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length[i];
  if (header_size > file_size - 8 || header_size > (uint64_t{100} << 20))
    return Corrupt(path,
                   "header of " + std::to_string(header_size) + " bytes in a file of " + std::to_string(file_size));
  std::string text(header_size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_size))) return Corrupt(path, "header cut short");
  const uint64_t data_size = file_size - 8 - header_size;

  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return Corrupt(path, "the header is not a JSON object");
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Corrupt(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) return Corrupt(path, "__metadata__." + m.key() + " is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& e = it.value();
    const std::string& name = it.key();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      return Corrupt(path, name + ": needs dtype, shape and data_offsets [begin, end]");
    auto dtype = DTypeFromSafetensors(e["dtype"].get<std::string>());
    if (!dtype) return Corrupt(path, name + ": dtype " + e["dtype"].get<std::string>() + " is not one Kiln uses");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& s : e["shape"]) {
      if (!s.is_number_unsigned()) return Corrupt(path, name + ": a shape entry is not a non-negative integer");
      t.shape.push_back(s.get<int64_t>());
      numel *= s.get<uint64_t>();
    }
    const auto& o = e["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      return Corrupt(path, name + ": data_offsets are not non-negative integers");
    const uint64_t begin = o[0].get<uint64_t>(), end = o[1].get<uint64_t>();
    if (begin > end || end > data_size)
      return Corrupt(path, name + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                               "] outside the " + std::to_string(data_size) + " data bytes");
    if (end - begin != numel * DTypeSize(*dtype))
      return Corrupt(path, name + ": " + std::to_string(end - begin) + " bytes for " + std::to_string(numel) +
                               " elements of " + e["dtype"].get<std::string>());
    t.bytes.resize(end - begin);
    in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
    if (!t.bytes.empty() &&
        !in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size())))
      return Corrupt(path, name + ": data cut short");
    ranges.emplace_back(begin, end);
    file.tensors.push_back(std::move(t));
  }
  // Sorted by data offset; overlapping ranges mean a damaged header.
  std::vector<size_t> order(file.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  std::vector<SafetensorsTensor> sorted;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k > 0 && ranges[order[k]].first < ranges[order[k - 1]].second &&
        ranges[order[k]].first != ranges[order[k]].second)
      return Corrupt(path, file.tensors[order[k]].name + " overlaps " + file.tensors[order[k - 1]].name);
    sorted.push_back(std::move(file.tensors[order[k]]));
  }
  file.tensors = std::move(sorted);
  return file;
}

}  // namespace kiln::client::diag
