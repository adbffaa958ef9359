#include "util/textproto.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "util/files.h"

namespace hilnas {
namespace {

// Collects every parse error with its position; protobuf reports lines and
// columns zero-based, people count from one.
class CollectingErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectingErrorCollector(absl::string_view origin) : origin_(origin) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }

  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string origin_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view origin,
                            google::protobuf::Message* msg) {
  CollectingErrorCollector errors(origin);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), msg) || !errors.errors().empty()) {
    if (errors.errors().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": cannot parse as ", msg->GetDescriptor()->full_name()));
    }
    return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "\n"));
  }
  return absl::OkStatus();
}

absl::Status ReadFileToString(const std::string& path, std::string* out) {
  if (absl::Status s = CheckRegularFile(path); !s.ok()) {
    // Callers and tests rely on NOT_FOUND naming the path for a missing file.
    if (absl::IsNotFound(s)) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open for reading"));
    }
    return s;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open for reading"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  *out = ss.str();
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = TempPathBeside(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot open for writing"));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status ReadTextProtoFile(const std::string& path, google::protobuf::Message* msg) {
  std::string text;
  absl::Status s = ReadFileToString(path, &text);
  if (!s.ok()) return s;
  return ParseTextProto(text, path, msg);
}

absl::Status WriteTextProtoFile(const std::string& path, const google::protobuf::Message& msg) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(msg, &text)) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot print ", msg.GetDescriptor()->full_name()));
  }
  return WriteFileAtomically(path, text);
}

}  // namespace hilnas
