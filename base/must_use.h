// Included first in every translation unit of the tree (the build passes
// `-include base/must_use.h`): a status dropped on the floor is a compile
// error (-Werror=unused-result).
//
// Abseil marks absl::Status and absl::StatusOr with [[nodiscard]] only in
// later releases; Debian's does not. Declaring them [[nodiscard]] before
// their definitions is allowed ([dcl.attr.nodiscard]: an entity may be
// redeclared with the attribute) and both g++ and clang honour it. To drop a
// status on purpose, say so: `(void)DoSomething();` with a comment why.
#pragma once

#ifdef __cplusplus
#include "absl/base/config.h"

namespace absl {
ABSL_NAMESPACE_BEGIN
class [[nodiscard]] Status;
template <typename T>
class [[nodiscard]] StatusOr;
ABSL_NAMESPACE_END
}  // namespace absl
#endif
