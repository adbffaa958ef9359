// Reading and writing protobuf text format (.textproto), the format of every
// hilnas configuration file (campaigns, search spaces, architectures).
#ifndef HILNAS_UTIL_TEXTPROTO_H_
#define HILNAS_UTIL_TEXTPROTO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace hilnas {

// Parses `text` into `*msg`. `origin` names the source in errors. A syntax
// error or unknown field yields INVALID_ARGUMENT with "origin:line:column:
// message", e.g. "space.textproto:4:3: Message type "hilnas.SearchSpace" has
// no field named "d_fnn"."
absl::Status ParseTextProto(absl::string_view text, absl::string_view origin,
                            google::protobuf::Message* msg);

// Reads a file and parses it; NOT_FOUND when the file cannot be opened.
absl::Status ReadTextProtoFile(const std::string& path, google::protobuf::Message* msg);

// Writes `msg` in text format, replacing the file atomically (write to a
// temporary sibling, then rename) so a crash never leaves half a file.
absl::Status WriteTextProtoFile(const std::string& path, const google::protobuf::Message& msg);

// Whole-file helpers used across hilnas.
absl::Status ReadFileToString(const std::string& path, std::string* out);
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace hilnas

#endif  // HILNAS_UTIL_TEXTPROTO_H_
