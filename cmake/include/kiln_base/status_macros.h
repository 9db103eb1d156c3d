// Propagation macros for absl::Status and absl::StatusOr: KILN_ABSL_RETURN_IF_ERROR and
// KILN_ABSL_ASSIGN_OR_RETURN, the one spelling of "pass this error up unchanged" in cache/,
// kernels/ and server/.
//
// Why it lives under cmake/include/ (target kiln_base): cache/ and kernels/ depend on nothing
// of ours, so a vocabulary they share cannot live in either of them or in server/. The one
// exception to that rule is this header-only vocabulary, which belongs to the build itself
// and carries no code of its own. The client does not use absl; its twin for kiln::Status is
// KILN_RETURN_IF_ERROR in kiln/status.h.
//
// Both macros return the status unchanged. Where an error is decorated, wrapped with context
// or handled, write the check out instead: a macro here would hide the one line that matters.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the absl::Status `expr` evaluates to from the enclosing function when it is not OK.
// The enclosing function returns absl::Status or absl::StatusOr<T>.
#define KILN_ABSL_RETURN_IF_ERROR(expr)                                       \
  do {                                                                        \
    if (::absl::Status kiln_absl_status_ = (expr); !kiln_absl_status_.ok()) { \
      return kiln_absl_status_;                                               \
    }                                                                         \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>); when it is not OK returns its status from the
// enclosing function, otherwise moves its value into `lhs`. `lhs` is a declaration
// (`auto x`, `std::string name`, `const std::string& y`) or an existing variable. A reference
// declaration refers to the value held by a hidden local of the enclosing scope, so it stays
// valid until that scope ends.
//
// It expands to several statements: use it as a statement of a braced block, never as the
// unbraced body of an `if` or a loop. An `expr` with a top-level comma (template arguments)
// needs parentheses around it; a `lhs` cannot have one (spell its type with `auto`).
#define KILN_ABSL_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ABSL_ASSIGN_OR_RETURN_IMPL_(KILN_BASE_CONCAT_(kiln_absl_statusor_, __COUNTER__), lhs, expr)

#define KILN_ABSL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                     \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = *std::move(statusor)

#define KILN_BASE_CONCAT_(a, b) KILN_BASE_CONCAT_INNER_(a, b)
#define KILN_BASE_CONCAT_INNER_(a, b) a##b
