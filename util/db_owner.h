// One process owns a coordinator's database (issue 39): `hilnas
// coordinator` takes this lock before it opens the stores, so a second
// coordinator on the same file refuses to start, naming the first, instead
// of resuming the same campaigns and handing the same queue out twice.
//
// The lock is flock(2) on a file beside the database, DB + ".owner", which
// also holds who owns it (pid, host, listen address, since when) for the
// refusal to name. Why flock on a file of its own:
//  - the kernel drops it when the process's last descriptor closes, so a
//    SIGKILLed or OOM-killed coordinator never blocks its restart (no stale
//    pid file to judge);
//  - SQLite holds POSIX (fcntl) locks on the database itself, which a
//    process loses when it closes ANY descriptor of that file: a second
//    open of the database to lock it would undo SQLite's own locks.
// Readers (`pareto show --db`, `export --db`, `audit`) do not take it:
// SQLite's WAL lets them read while the owner writes.
//
// Network filesystems are refused by name (NFS, SMB/CIFS, FUSE mounts such
// as sshfs, Ceph, AFS, 9p, ...): the database runs in WAL mode, which
// needs every process on one host sharing memory, and an flock there is
// either local to one client (NFS mounted with `nolock`, FUSE) or depends
// on a lock server that a client's crash can leave holding it.
#ifndef HILNAS_UTIL_DB_OWNER_H_
#define HILNAS_UTIL_DB_OWNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace hilnas {

struct DbOwnerInfo {
  int64_t pid = 0;
  std::string host;
  std::string address;  // what it listens on
  int64_t since_unix_ms = 0;
  std::string ToString() const;  // "pid 123 on host h, listening on a, since 2026-...Z"
};

class DbOwnerLock {
 public:
  // Takes the lock for `db` (which need not exist yet; its folder must).
  // FAILED_PRECONDITION naming the holder where another process owns it;
  // FAILED_PRECONDITION naming the filesystem where the lock cannot hold;
  // the OS error naming the file otherwise.
  static absl::StatusOr<std::unique_ptr<DbOwnerLock>> Acquire(const std::string& db,
                                                              const std::string& address);
  ~DbOwnerLock();  // releases it (the kernel does the same on any exit)
  DbOwnerLock(const DbOwnerLock&) = delete;
  DbOwnerLock& operator=(const DbOwnerLock&) = delete;

  // Records the address actually bound (a port 0 resolved).
  absl::Status SetAddress(const std::string& address);
  const DbOwnerInfo& info() const { return info_; }

  // The owner of `db` while one holds the lock, nullopt when none does.
  static absl::StatusOr<std::optional<DbOwnerInfo>> Owner(const std::string& db);

  static std::string LockPath(const std::string& db) { return db + ".owner"; }

 private:
  DbOwnerLock(int fd, std::string path, DbOwnerInfo info)
      : fd_(fd), path_(std::move(path)), info_(std::move(info)) {}
  absl::Status Write();
  int fd_;
  std::string path_;
  DbOwnerInfo info_;
};

// The name of a network filesystem `dir` lies on, empty for a local one.
absl::StatusOr<std::string> NetworkFilesystemOf(const std::string& dir);
// The same for statfs(2)'s f_type.
std::string NetworkFilesystemName(uint64_t f_type);

}  // namespace hilnas

#endif  // HILNAS_UTIL_DB_OWNER_H_
