// The registry of published shapes (MobileLLM-Flash Tab. 5, KV Prediction
// Tab. 1). The shapes are data (search_space/data/shapes.textproto), compiled
// into the binary so `hilnas shapes` works from anywhere.
#ifndef HILNAS_SEARCH_SPACE_SHAPES_H_
#define HILNAS_SEARCH_SPACE_SHAPES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "search_space/arch.h"

namespace hilnas {

struct Shape {
  std::string name;
  std::string source;  // paper and table
  std::string notes;   // approximations
  Arch arch;           // validated
};

// Parses a ShapeRegistry textproto, resolves base_shape and aux_shape
// references and validates every arch. Errors name the origin and shape.
absl::StatusOr<std::vector<Shape>> ParseShapeRegistry(absl::string_view text,
                                                      absl::string_view origin);

// The built-in registry, parsed once. Thread-safe.
absl::StatusOr<std::vector<Shape>> PublishedShapes();

// NOT_FOUND lists the known names.
absl::StatusOr<Shape> FindShape(absl::string_view name);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SPACE_SHAPES_H_
