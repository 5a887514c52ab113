// Status helpers shared by every module.
//
// The error type everywhere is absl::Status / absl::StatusOr<T>. These macros
// propagate errors the way RocksDB and LevelDB code does by hand.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MS_STATUS_CONCAT_INNER_(a, b) a##b
#define MS_STATUS_CONCAT_(a, b) MS_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define MS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ms_status_ = (expr);      \
    if (!ms_status_.ok()) return ms_status_; \
  } while (0)

// `MS_ASSIGN_OR_RETURN(auto x, F())` declares x from an OK StatusOr, or
// returns its status from the current function.
#define MS_ASSIGN_OR_RETURN(lhs, expr) \
  MS_ASSIGN_OR_RETURN_IMPL_(MS_STATUS_CONCAT_(ms_statusor_, __LINE__), lhs, expr)

#define MS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()
