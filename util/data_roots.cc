#include "util/data_roots.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/files.h"

namespace hilnas {

namespace fs = std::filesystem;

absl::StatusOr<DataRoots> DataRoots::Make(const std::vector<std::string>& roots,
                                          const std::string& owner) {
  DataRoots out;
  out.owner_ = owner;
  for (const std::string& r : roots) {
    std::error_code ec;
    const fs::path canonical = fs::canonical(r, ec);
    if (ec || !fs::is_directory(canonical, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-root ", r, ": not an existing directory"));
    }
    out.roots_.push_back(canonical.string());
  }
  return out;
}

absl::Status DataRoots::Check(const std::string& field, const std::string& path) const {
  if (path.empty() || roots_.empty()) return absl::OkStatus();
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " ", why));
  };
  const fs::path p(path);
  if (!p.is_absolute()) return refuse("is not an absolute path");
  for (const fs::path& part : p) {
    if (part == "..") return refuse("contains \"..\"; name the folder directly");
  }
  std::error_code ec;
  // Symlinks in the existing part are resolved; a link pointing out of a
  // root lands outside it here.
  const std::string resolved = fs::weakly_canonical(p, ec).string();
  if (ec) return refuse(absl::StrCat("cannot be resolved: ", ec.message()));
  for (const std::string& root : roots_) {
    if (PathWithin(resolved, root)) return absl::OkStatus();
  }
  return refuse(absl::StrCat(resolved == path ? "" : absl::StrCat("(resolves to ", resolved, ") "),
                             "is outside ", owner_, " data roots (", absl::StrJoin(roots_, ", "),
                             ")"));
}

}  // namespace hilnas
