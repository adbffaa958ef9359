// Checks on paths before they are opened: a reader that expects a file must
// never block on a FIFO or read a directory as bytes (which ends in a
// multi-exabyte allocation), and a writer must never destroy what it reads.
#ifndef HILNAS_UTIL_FILES_H_
#define HILNAS_UTIL_FILES_H_

#include <filesystem>
#include <string>

#include "absl/status/status.h"

namespace hilnas {

// OK for an existing regular file (symlinks followed). NOT_FOUND when
// nothing is there; FAILED_PRECONDITION naming what is there instead (a
// directory, a FIFO, a device, a socket).
absl::Status CheckRegularFile(const std::string& path);

// Whether `inner` is `outer` or lies inside it, compared component by
// component ("/data2" is not inside "/data"). Both should be canonical.
bool PathWithin(const std::filesystem::path& inner, const std::filesystem::path& outer);

// A name beside `path` for writing it before renaming into place, unique to
// this call: path + ".tmp-" + process id + "-" + a per-process count. Two
// writers of one path (two agents of a fleet building the same candidate
// in a shared work folder) each stage their own file, and the last rename
// wins whole, where a shared "path.tmp" let one writer rename the other's
// half-written file or find its own gone.
std::string TempPathBeside(const std::string& path);

}  // namespace hilnas

#endif  // HILNAS_UTIL_FILES_H_
