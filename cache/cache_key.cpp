// CacheKey: the canonical encoding of KeyInputs and its SHA-256.
#include "cache/cache_key.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/sha256.h"

namespace kiln::cache {
namespace {

// NOTES: the first line names the encoding itself, so a future encoding can never produce
// the bytes of this one even if its fields happen to line up.
constexpr absl::string_view kEncodingHeader = "kiln-cache-key-encoding 1\n";

class Encoder {
 public:
  // absl::string_view: this abseil is built without std::string_view (StrCat wants its own).
  void Field(absl::string_view tag, absl::string_view value) {
    absl::StrAppend(&out_, tag, " ", value.size(), ":", value, "\n");
  }
  void Pair(absl::string_view tag, absl::string_view first, absl::string_view second) {
    absl::StrAppend(&out_, tag, " ", first.size(), ":", first, " ", second.size(), ":", second, "\n");
  }
  void Count(absl::string_view tag, size_t count) { absl::StrAppend(&out_, tag, " ", count, "\n"); }
  void List(absl::string_view tag, absl::string_view item_tag, const std::vector<std::string>& items) {
    Count(tag, items.size());
    for (const auto& item : items) Field(item_tag, item);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// An option carries an absolute path when it is one ("/x"), or when its value after "=" or
// after a short flag such as -I/-include is one.
bool HasAbsolutePath(std::string_view option) {
  if (option.starts_with('/')) return true;
  if (auto eq = option.find('='); eq != std::string_view::npos && option.substr(eq + 1).starts_with('/')) return true;
  for (std::string_view flag : {"-I", "-isystem", "-include", "-L", "-o"}) {
    if (option.starts_with(flag) && option.substr(flag.size()).starts_with('/')) return true;
  }
  return false;
}

}  // namespace

std::string CanonicalEncoding(const KeyInputs& in) {
  Encoder e;
  e.Field("format_version", absl::StrCat(in.format_version));
  e.Field("op", in.op);
  e.Field("uri", in.uri);
  e.Count("params", in.params.size());
  for (const auto& [name, value] : in.params) e.Pair("param", name, value);  // std::map: sorted
  e.Count("sources", in.sources.size());
  for (const auto& source : in.sources) e.Pair("source", source.name, source.sha256);
  e.Field("kernels_tree_digest", in.kernels_tree_digest);
  e.List("options", "option", in.options);
  e.List("link_options", "link_option", in.link_options);
  e.List("entries", "entry", in.entries);
  e.Field("arch", in.arch);
  e.Field("nvrtc_version", in.nvrtc_version);
  e.Field("nvjitlink_version", in.nvjitlink_version);
  e.Field("cuda_headers_version", in.cuda_headers_version);
  e.Field("kiln_version", in.kiln_version);
  return absl::StrCat(kEncodingHeader, e.Take());
}

std::string ComputeCacheKey(const KeyInputs& inputs) { return Sha256Hex(CanonicalEncoding(inputs)); }

absl::Status ValidateKeyInputs(const KeyInputs& in) {
  std::vector<std::string> problems;
  if (in.op.empty()) problems.push_back("op is empty");
  if (in.uri.empty()) problems.push_back("uri is empty");
  if (in.arch.empty()) problems.push_back("arch is empty");
  for (const auto& source : in.sources) {
    if (source.name.empty()) problems.push_back("a source has no name");
    if (source.name.starts_with('/'))
      problems.push_back(
          absl::StrCat("source name \"", source.name, "\" is an absolute path (use its name as the compile sees it)"));
    if (!IsSha256Hex(source.sha256))
      problems.push_back(
          absl::StrCat("source \"", source.name, "\" has hash \"", source.sha256, "\", not 64 lowercase hex digits"));
  }
  for (const auto* list : {&in.options, &in.link_options}) {
    for (const auto& option : *list) {
      if (HasAbsolutePath(option))
        problems.push_back(absl::StrCat("option \"", option,
                                        "\" carries an absolute path (keep include paths out of "
                                        "the key options)"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("cache key inputs for uri \"", in.uri, "\" are not usable: ", absl::StrJoin(problems, "; ")));
}

}  // namespace kiln::cache
