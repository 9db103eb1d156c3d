#include "server/engine/prepared_memo.h"

#include "server/engine/kernel_engine.h"

namespace kiln::server {
namespace {

void Field(std::string* out, std::string_view value) {
  out->append(std::to_string(value.size())).push_back(':');
  out->append(value);
}

uint64_t SizeOf(const PreparedRequest& p) {
  uint64_t bytes = sizeof(PreparedRequest) + p.key.size();
  for (const auto* list : {&p.spec.headers, &p.spec.units})
    for (const auto& f : *list) bytes += f.content.size() + f.name.size();
  return bytes;
}

}  // namespace

std::string PreparedMemo::Fingerprint(const KernelQuery& q) {
  std::string f;
  Field(&f, q.is_source ? "source" : "op");
  Field(&f, q.target_arch);
  Field(&f, std::string{char('0' + q.lineinfo), char('0' + q.device_debug), char('0' + q.verbose_log)});
  if (!q.is_source) {
    Field(&f, q.op);
    for (const auto& [k, v] : q.params) Field(&f, k), Field(&f, v);  // std::map: sorted
    return f;
  }
  Field(&f, q.source.name);
  Field(&f, q.source.code);
  f.append("entries");
  for (const auto& e : q.source.entries) Field(&f, e);
  f.append("options");
  for (const auto& o : q.source.options) Field(&f, o);
  f.append("units");
  for (const auto& u : q.source.extra_units) Field(&f, u.name), Field(&f, u.code);
  return f;
}

std::shared_ptr<const PreparedRequest> PreparedMemo::Get(const std::string& fingerprint, uint64_t tree_generation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(fingerprint);
  if (it == index_.end()) return nullptr;
  if (it->second->prepared->tree->generation != tree_generation) {  // the kernels changed
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->prepared;
}

void PreparedMemo::Put(const std::string& fingerprint, std::shared_ptr<const PreparedRequest> prepared) {
  uint64_t bytes = SizeOf(*prepared) + 2 * fingerprint.size();
  if (bytes > max_bytes_ / 4) return;  // one huge source must not flush everything else
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(fingerprint); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Entry{fingerprint, std::move(prepared), bytes});
  index_[fingerprint] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > max_bytes_ && lru_.size() > 1) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().fingerprint);
    lru_.pop_back();
  }
}

}  // namespace kiln::server
