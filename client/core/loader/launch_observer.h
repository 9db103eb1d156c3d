// The one hook of the launch path: a function called right before every cuLaunchKernelEx of
// the library (LaunchFunction), with the kernel's module, entry and launch config. The call
// diagnostics (client/diag) install it while they trace calls; the loader knows nothing of
// them. Off (null), a launch pays one relaxed load and one predictable branch.
#pragma once

#include <atomic>
#include <string_view>

#include "kiln/kernel.h"

#ifndef KILN_UNLIKELY
#define KILN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#endif

namespace kiln::client {

// `module` is null for a launch without one (a raw kiln::Kernel always has one; the hook
// takes it as a pointer so a launch path without a module can still be observed).
using LaunchObserver = void (*)(const ModuleInfo* module, std::string_view entry, const LaunchConfig& config);

namespace detail {
extern std::atomic<LaunchObserver> g_launch_observer;
}

// Installs `observer` for every later launch of the process (null: none).
inline void SetLaunchObserver(LaunchObserver observer) {
  detail::g_launch_observer.store(observer, std::memory_order_relaxed);
}

inline LaunchObserver CurrentLaunchObserver() { return detail::g_launch_observer.load(std::memory_order_relaxed); }

}  // namespace kiln::client
