// Kubernetes resource quantities ("16Gi", "500M", "1.5Gi", "129e6", "250m"), as the API
// server accepts them in a pod's resources: a decimal number, then a binary (Ki … Ei),
// decimal (n, u, m, k, M, G, T, P, E) or exponent (e3, E-2) suffix, or none.
#pragma once

#include <optional>
#include <string_view>

namespace tessera::api {

// The value of `text` (for memory: bytes), or nullopt when it is not a quantity.
std::optional<double> ParseQuantity(std::string_view text);

}  // namespace tessera::api
