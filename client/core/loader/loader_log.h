// KILN_LOADER_LOG: the client library's artifact-loading log. With KILN_LOADER_LOG=1 every
// module this process fetches from kilnd or loads writes one line to stderr: what, for which
// arch, where the daemon found it (memory, disk, prebuilt, compiled + job), whether this process
// had already loaded the cubin (in-process cache), the cubin's size and how it travelled, and
// the rpc / verify / load times. Separate from op call logging (KILN_LOGLEVEL) and off by
// default; off costs one branch on a value read once.
#pragma once

#include <string>

#include "client/core/rpc/cubin_fetch.h"
#include "kiln/status.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

// What a fetch led to, for the line.
enum class LoaderEvent {
  kFetched,        // fetched and verified; the caller does not load it (Prefetch, `kiln get`)
  kLoaded,         // fetched, verified and loaded into this process (cuLibraryLoadData)
  kAlreadyLoaded,  // fetched, but this process had loaded that cubin for another request
  kLoadFailed,     // fetched and verified, but loading it into this process failed
};

// Parses a value of KILN_LOADER_LOG: unset, "" and "0" are off, "1" is on. Anything else is
// off, with `*error` naming the variable, the value and what is accepted.
bool ParseLoaderLog(const char* value, std::string* error);

// Whether this process logs: KILN_LOADER_LOG read once (an invalid value is said once on
// stderr); after that, one branch on the cached value.
bool LoaderLogEnabled();

// The line of one fetch of `request` (exposed for tests); load_ms only counts for kLoaded.
std::string LoaderLogLine(LoaderEvent event, const v1::GetKernelRequest& request, const FetchedCubin& fetched,
                          double load_ms);
// The line of a failed fetch (the status message names the request).
std::string LoaderLogFailure(double rpc_ms, const Status& status);

// Writes `line` to stderr in one write (lines of threads don't mix).
void WriteLoaderLine(const std::string& line);

// When the log is on: the line of one fetch (`event`), or of a fetch that failed after
// `elapsed_ms`. Every fetch of the library writes exactly one of them: the module cache for
// the modules it loads, Prefetch and `kiln get` (kFetched) for the cubins they do not load.
void LogFetch(LoaderEvent event, const v1::GetKernelRequest& request, const FetchedCubin& fetched, double load_ms);
void LogFetchFailure(double elapsed_ms, const Status& status);

}  // namespace kiln::client
