// The folders requests from the network may name (DESIGN.md, Security):
// backbones, token files and checkpoints in campaign configs and benchmark
// requests must resolve, symlinks followed, to a path under one of them.
// `hilnas coordinator --data-root DIR` (repeatable) sets the coordinator's;
// `hilnas agent --data-root DIR` an agent's own, which it checks whatever
// its coordinator sends (issue 39).
#ifndef HILNAS_UTIL_DATA_ROOTS_H_
#define HILNAS_UTIL_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

class DataRoots {
 public:
  // No roots: every path is accepted (a loopback-only coordinator whose
  // users are the machine's own; `hilnas coordinator` refuses to expose
  // itself this way).
  DataRoots() = default;
  // Each root must exist and be a directory; it is kept in canonical form.
  // INVALID_ARGUMENT names the root.
  // `owner` names whose roots they are in refusals ("the coordinator's").
  static absl::StatusOr<DataRoots> Make(const std::vector<std::string>& roots,
                                        const std::string& owner = "the coordinator's");

  bool unrestricted() const { return roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }

  // OK when `path` is absolute, has no ".." component, and resolves under a
  // root; INVALID_ARGUMENT naming `field` and the path otherwise. An empty
  // path is OK (the field is unset).
  absl::Status Check(const std::string& field, const std::string& path) const;

 private:
  std::vector<std::string> roots_;  // canonical, without trailing '/'
  std::string owner_ = "the coordinator's";
};

}  // namespace hilnas

#endif  // HILNAS_UTIL_DATA_ROOTS_H_
