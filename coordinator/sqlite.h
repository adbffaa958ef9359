// A thin RAII layer over the SQLite C API: a connection and prepared
// statements whose errors come back as absl::Status naming the database file
// and the SQL. Not thread-safe; callers serialise access.
#ifndef HILNAS_COORDINATOR_SQLITE_H_
#define HILNAS_COORDINATOR_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"

namespace hilnas {

class SqliteStatement;

class SqliteDb {
 public:
  // Opens (creating if needed) `path` in WAL mode with a busy timeout.
  // INVALID_ARGUMENT when the file is not a SQLite database.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();
  // Owns the raw handle: one owner, never copied.
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  absl::Status Exec(const std::string& sql);
  absl::StatusOr<SqliteStatement> Prepare(const std::string& sql);
  int64_t LastInsertRowId() const;
  int Changes() const;
  const std::string& path() const { return path_; }
  absl::Status Error(const std::string& what) const;

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

// Bind parameters are 1-based, columns 0-based, as in SQLite. Binds chain;
// the first bind that fails is remembered and returned by Step and Run, so
// no statement runs with a parameter missing.
class SqliteStatement {
 public:
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  ~SqliteStatement();

  SqliteStatement& Bind(int i, int64_t v);
  SqliteStatement& Bind(int i, const std::string& v);  // bound as text
  SqliteStatement& BindBlob(int i, const std::string& bytes);
  SqliteStatement& BindDouble(int i, double v);
  // True while a row is available; false when done. Errors name the SQL.
  absl::StatusOr<bool> Step();
  // Runs to completion.
  absl::Status Run();

  int64_t Int(int col) const;
  std::string Text(int col) const;
  std::string Blob(int col) const;
  double Double(int col) const;
  bool IsNull(int col) const;
  // Parses the blob in `col` into `out`. DATA_LOSS naming the database and
  // `what` (e.g. "job 7's request") when the bytes are not such a message.
  absl::Status ParseBlob(int col, google::protobuf::MessageLite* out, const std::string& what) const;

 private:
  friend class SqliteDb;
  SqliteStatement(const SqliteDb* db, sqlite3_stmt* stmt, std::string sql)
      : db_(db), stmt_(stmt), sql_(std::move(sql)) {}
  // Records the first failed bind (rc != SQLITE_OK) of parameter `i`.
  SqliteStatement& Check(int rc, int i);

  const SqliteDb* db_;
  sqlite3_stmt* stmt_;
  std::string sql_;
  absl::Status bind_status_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back unless committed.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDb* db) : db_(db) { begun_ = db_->Exec("BEGIN IMMEDIATE"); }
  ~SqliteTransaction() {
    if (begun_.ok() && !done_) db_->Exec("ROLLBACK").IgnoreError();
  }
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  absl::Status begun() const { return begun_; }
  absl::Status Commit() {
    done_ = true;
    return db_->Exec("COMMIT");
  }

 private:
  SqliteDb* db_;
  absl::Status begun_;
  bool done_ = false;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_SQLITE_H_
