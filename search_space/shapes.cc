#include "search_space/shapes.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/arch.pb.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {

extern const char kShapesTextproto[];  // generated from data/shapes.textproto

absl::StatusOr<std::vector<Shape>> ParseShapeRegistry(absl::string_view text,
                                                      absl::string_view origin) {
  ShapeRegistry registry;
  HILNAS_RETURN_IF_ERROR(ParseTextProto(text, origin, &registry));
  std::map<std::string, ArchSpec> resolved;
  std::vector<Shape> shapes;
  for (const PublishedShape& s : registry.shape()) {
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": shape \"", s.name(), "\": ", what));
    };
    if (s.name().empty()) return error("name is empty");
    if (resolved.count(s.name())) return error("defined twice");
    ArchSpec spec;
    if (!s.base_shape().empty()) {
      auto it = resolved.find(s.base_shape());
      if (it == resolved.end()) {
        return error(absl::StrCat("base_shape \"", s.base_shape(), "\" is not defined above"));
      }
      spec = it->second;
    }
    spec.MergeFrom(s.arch());
    if (!s.aux_shape().empty()) {
      auto it = resolved.find(s.aux_shape());
      if (it == resolved.end()) {
        return error(absl::StrCat("aux_shape \"", s.aux_shape(), "\" is not defined above"));
      }
      *spec.mutable_kv_prediction()->mutable_canonical() = it->second;
    }
    auto arch = ArchFromProto(spec);
    if (!arch.ok()) return error(arch.status().message());
    resolved[s.name()] = spec;
    shapes.push_back(Shape{s.name(), s.source(), s.notes(), *std::move(arch)});
  }
  return shapes;
}

absl::StatusOr<std::vector<Shape>> PublishedShapes() {
  static const auto* const shapes = new absl::StatusOr<std::vector<Shape>>(
      ParseShapeRegistry(kShapesTextproto, "search_space/data/shapes.textproto"));
  return *shapes;
}

absl::StatusOr<Shape> FindShape(absl::string_view name) {
  HILNAS_ASSIGN_OR_RETURN(std::vector<Shape> shapes, PublishedShapes());
  std::vector<std::string> names;
  for (Shape& s : shapes) {
    if (s.name == name) return std::move(s);
    names.push_back(s.name);
  }
  return absl::NotFoundError(
      absl::StrCat("no published shape named \"", name, "\"; known: ", absl::StrJoin(names, ", ")));
}

}  // namespace hilnas
