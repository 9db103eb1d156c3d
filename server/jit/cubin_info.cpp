#include "server/jit/cubin_info.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::server {
namespace {

// .nv.info attribute records: {format u8, attribute u8, then a u16 value (formats 1-3) or a
// u16 size and that many bytes (format 4, EIFMT_SVAL)}. Layout and codes as cuobjdump -elf
// prints them ("EIATTR_MAX_THREADS Format: EIFMT_SVAL Value: 0x100 0x1 0x1"); checked
// against a cubin of a __launch_bounds__(256) kernel in tests/server/jit.
constexpr uint8_t kFormatSizedValue = 0x04;
constexpr uint8_t kAttrMaxThreads = 0x05;
constexpr uint8_t kAttrMinStackSize = 0x12;  // {u32 symbol, u32 bytes}
constexpr uint8_t kAttrRegCount = 0x2f;      // {u32 symbol, u32 registers}
constexpr uint32_t kSectionNoBits = 8;       // SHT_NOBITS (.nv.shared.*)
constexpr uint8_t kSymbolFunction = 2;       // STT_FUNC
constexpr uint8_t kBindGlobal = 1;           // STB_GLOBAL

template <typename T>
bool ReadAt(std::string_view bytes, uint64_t offset, T* value) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(value, bytes.data() + offset, sizeof(T));  // ELF64 little endian, as the host
  return true;
}

int MaxThreadsFromNvInfo(std::string_view info) {
  uint64_t at = 0;
  while (at + 4 <= info.size()) {
    uint8_t format = static_cast<uint8_t>(info[at]);
    uint8_t attribute = static_cast<uint8_t>(info[at + 1]);
    uint16_t size = 0;
    ReadAt(info, at + 2, &size);
    if (format != kFormatSizedValue) {
      if (format == 0 || format > kFormatSizedValue) return 0;  // not a record: stop
      at += 4;
      continue;
    }
    if (attribute == kAttrMaxThreads && size == 12) {
      uint32_t x = 0, y = 0, z = 0;
      ReadAt(info, at + 4, &x);
      ReadAt(info, at + 8, &y);
      ReadAt(info, at + 12, &z);
      uint64_t threads = uint64_t(x) * (y ? y : 1) * (z ? z : 1);
      return threads > 0 && threads <= 1024 ? static_cast<int>(threads) : 0;
    }
    at += 4 + size;
  }
  return 0;
}

// Calls f(attribute, symbol, value) for each {u32 symbol, u32 value} record of .nv.info.
template <typename F>
void ForEachSymbolValue(std::string_view info, F f) {
  uint64_t at = 0;
  while (at + 4 <= info.size()) {
    uint8_t format = static_cast<uint8_t>(info[at]);
    uint8_t attribute = static_cast<uint8_t>(info[at + 1]);
    uint16_t size = 0;
    ReadAt(info, at + 2, &size);
    if (format != kFormatSizedValue) {
      if (format == 0 || format > kFormatSizedValue) return;
      at += 4;
      continue;
    }
    uint32_t symbol = 0, value = 0;
    if (size == 8 && ReadAt(info, at + 4, &symbol) && ReadAt(info, at + 8, &value)) f(attribute, symbol, value);
    at += 4 + size;
  }
}

}  // namespace

std::map<std::string, CubinKernelInfo, std::less<>> ReadCubinKernelInfo(std::string_view cubin) {
  std::map<std::string, CubinKernelInfo, std::less<>> kernels;
  if (cubin.size() < 64 ||
      std::memcmp(cubin.data(),
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      cubin[4] != 2 /* 64-bit */ || cubin[5] != 1 /* little endian */) {
    return kernels;
  }
  uint64_t section_offset = 0;
  uint16_t entry_size = 0, count = 0, names_index = 0;
  if (!ReadAt(cubin, 0x28, &section_offset) || !ReadAt(cubin, 0x3a, &entry_size) || !ReadAt(cubin, 0x3c, &count) ||
      !ReadAt(cubin, 0x3e, &names_index) || entry_size < 64 || names_index >= count) {
    return kernels;
  }
  struct Section {
    uint32_t name = 0, type = 0, link = 0;
    uint64_t offset = 0, size = 0;
  };
  auto section = [&](uint16_t i, Section* s) {
    uint64_t at = section_offset + uint64_t(i) * entry_size;
    if (!ReadAt(cubin, at, &s->name) || !ReadAt(cubin, at + 4, &s->type) || !ReadAt(cubin, at + 24, &s->offset) ||
        !ReadAt(cubin, at + 32, &s->size) || !ReadAt(cubin, at + 40, &s->link))
      return false;
    // SHT_NOBITS sections (shared memory) have a size but no bytes in the file.
    return s->type == kSectionNoBits || (s->offset <= cubin.size() && s->size <= cubin.size() - s->offset);
  };
  Section names;
  if (!section(names_index, &names)) return kernels;
  std::string_view name_table = cubin.substr(names.offset, names.size);
  auto name_of = [](std::string_view table, uint32_t at) {
    if (at >= table.size()) return std::string_view();
    std::string_view name = table.substr(at);
    return name.substr(0, name.find('\0'));
  };
  std::vector<Section> sections(count);
  std::vector<std::string_view> section_names(count);
  std::string_view global_info, symbols, symbol_names;
  for (uint16_t i = 0; i < count; ++i) {
    Section& s = sections[i];
    if (!section(i, &s)) continue;
    std::string_view name = section_names[i] = name_of(name_table, s.name);
    constexpr std::string_view kInfo = ".nv.info.", kConst0 = ".nv.constant0.", kShared = ".nv.shared.";
    if (name == ".nv.info") {
      global_info = cubin.substr(s.offset, s.size);
    } else if (name == ".symtab" && s.link < count) {
      symbols = cubin.substr(s.offset, s.size);
    } else if (name.starts_with(kInfo)) {
      kernels[std::string(name.substr(kInfo.size()))].max_threads = MaxThreadsFromNvInfo(
          cubin.substr(s.offset, s.size));
    } else if (name.starts_with(kConst0)) {
      kernels[std::string(name.substr(kConst0.size()))].const0_bytes = static_cast<int>(s.size);
    } else if (name.starts_with(kShared) && !name.starts_with(".nv.shared.reserved")) {
      kernels[std::string(name.substr(kShared.size()))].shared_section_bytes = static_cast<int>(s.size);
    }
  }
  // Symbols: ELF64 entries of 24 bytes {u32 name, u8 info, u8 other, u16 section, u64, u64}.
  std::vector<std::string> symbol_by_index;
  for (uint16_t i = 0; i < count && symbols.data() != nullptr; ++i) {
    if (section_names[i] != ".symtab") continue;
    const Section& strtab = sections[sections[i].link];
    if (strtab.offset > cubin.size() || strtab.size > cubin.size() - strtab.offset) break;
    symbol_names = cubin.substr(strtab.offset, strtab.size);
  }
  for (uint64_t at = 0; at + 24 <= symbols.size(); at += 24) {
    uint32_t name_at = 0;
    uint8_t info = 0;
    uint16_t section_index = 0;
    ReadAt(symbols, at, &name_at);
    ReadAt(symbols, at + 4, &info);
    ReadAt(symbols, at + 6, &section_index);
    std::string name(name_of(symbol_names, name_at));
    symbol_by_index.push_back(name);
    if ((info & 0xf) == kSymbolFunction && (info >> 4) == kBindGlobal && section_index < count &&
        section_names[section_index] == ".text." + name)
      kernels[name].is_kernel = true;
  }
  ForEachSymbolValue(global_info, [&](uint8_t attribute, uint32_t symbol, uint32_t value) {
    if (symbol >= symbol_by_index.size()) return;
    auto it = kernels.find(symbol_by_index[symbol]);
    if (it == kernels.end()) return;
    if (attribute == kAttrRegCount) it->second.registers = static_cast<int>(value);
    if (attribute == kAttrMinStackSize) it->second.stack_bytes = static_cast<int>(value);
  });
  return kernels;
}

}  // namespace kiln::server
