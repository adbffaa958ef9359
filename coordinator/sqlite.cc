#include "coordinator/sqlite.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace hilnas {

namespace {

// Why a database cannot be written, when the reason is the file system and
// not the file (SQLite reports both as an unusable database): a read-only
// file, or a folder where WAL's -wal and -shm files cannot be created.
std::string WhyNotWritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (fs::exists(p, ec) && access(p.c_str(), W_OK) != 0) {
    return absl::StrCat(path, " is read-only for this user");
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return absl::StrCat("its folder ", dir,
                        " is not writable (SQLite keeps its -wal and -shm files beside it)");
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  if (const std::string why = WhyNotWritable(path); !why.empty()) {
    return absl::PermissionDeniedError(absl::StrCat("database ", path, ": cannot write: ", why));
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InvalidArgumentError(absl::StrCat("database ", path, ": cannot open: ", msg));
  }
  std::unique_ptr<SqliteDb> out(new SqliteDb(db, path));
  sqlite3_busy_timeout(db, 5000);
  // WAL survives a killed coordinator without losing committed rows, and
  // lets `sqlite3` readers look at a live campaign.
  absl::Status s = out->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("database ", path, " is not a usable SQLite file: ", s.message()));
  }
  return out;
}

SqliteDb::~SqliteDb() { sqlite3_close_v2(db_); }

absl::Status SqliteDb::Error(const std::string& what) const {
  return absl::InternalError(
      absl::StrCat("database ", path_, ": ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status SqliteDb::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("database ", path_, ": ", msg, " in: ", sql));
  }
  return absl::OkStatus();
}

absl::StatusOr<SqliteStatement> SqliteDb::Prepare(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return Error(absl::StrCat("prepare \"", sql, "\""));
  }
  return SqliteStatement(this, stmt, sql);
}

int64_t SqliteDb::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
int SqliteDb::Changes() const { return sqlite3_changes(db_); }

SqliteStatement::SqliteStatement(SqliteStatement&& o) noexcept
    : db_(o.db_), stmt_(o.stmt_), sql_(std::move(o.sql_)), bind_status_(std::move(o.bind_status_)) {
  o.stmt_ = nullptr;
}

SqliteStatement::~SqliteStatement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

SqliteStatement& SqliteStatement::Bind(int i, int64_t v) {
  return Check(sqlite3_bind_int64(stmt_, i, v), i);
}

SqliteStatement& SqliteStatement::Bind(int i, const std::string& v) {
  return Check(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), i);
}

SqliteStatement& SqliteStatement::BindDouble(int i, double v) {
  return Check(sqlite3_bind_double(stmt_, i, v), i);
}

SqliteStatement& SqliteStatement::BindBlob(int i, const std::string& bytes) {
  return Check(sqlite3_bind_blob64(stmt_, i, bytes.data(), bytes.size(), SQLITE_TRANSIENT), i);
}

SqliteStatement& SqliteStatement::Check(int rc, int i) {
  if (rc != SQLITE_OK && bind_status_.ok()) {
    bind_status_ = db_->Error(absl::StrCat("bind parameter ", i, " of \"", sql_, "\""));
  }
  return *this;
}

absl::StatusOr<bool> SqliteStatement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(absl::StrCat("step \"", sql_, "\""));
}

absl::Status SqliteStatement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t SqliteStatement::Int(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string SqliteStatement::Text(int col) const {
  const unsigned char* t = sqlite3_column_text(stmt_, col);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, col)) : "";
}

std::string SqliteStatement::Blob(int col) const {
  const void* b = sqlite3_column_blob(stmt_, col);
  return b ? std::string(static_cast<const char*>(b), sqlite3_column_bytes(stmt_, col)) : "";
}

bool SqliteStatement::IsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

absl::Status SqliteStatement::ParseBlob(int col, google::protobuf::MessageLite* out,
                                        const std::string& what) const {
  if (out->ParseFromString(Blob(col))) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("database ", db_->path(), ": ", what,
                                          " is corrupt (not a ", out->GetTypeName(),
                                          "); restore the file from a backup or remove the row"));
}

double SqliteStatement::Double(int col) const { return sqlite3_column_double(stmt_, col); }

}  // namespace hilnas
