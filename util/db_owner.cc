#include "util/db_owner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hilnas {
namespace {

std::string Errno(const std::string& what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// The lock file's text: one key=value a line.
std::string Serialize(const DbOwnerInfo& info) {
  return absl::StrCat("pid=", info.pid, "\nhost=", info.host, "\naddress=", info.address,
                      "\nsince_unix_ms=", info.since_unix_ms, "\n");
}

DbOwnerInfo Parse(const std::string& text) {
  DbOwnerInfo info;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, '=');
    if (kv.first == "pid") (void)absl::SimpleAtoi(kv.second, &info.pid);
    if (kv.first == "host") info.host = std::string(kv.second);
    if (kv.first == "address") info.address = std::string(kv.second);
    if (kv.first == "since_unix_ms") (void)absl::SimpleAtoi(kv.second, &info.since_unix_ms);
  }
  return info;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n <= 0 || out.size() > (64 << 10)) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

std::string FolderOf(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

std::string DbOwnerInfo::ToString() const {
  if (pid == 0) return "a process that has not written its details yet";
  return absl::StrCat("pid ", pid, " on host ", host.empty() ? "?" : host, ", listening on ",
                      address.empty() ? "?" : address, ", since ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(since_unix_ms),
                                       absl::UTCTimeZone()));
}

std::string NetworkFilesystemName(uint64_t f_type) {
  // f_type magic numbers of linux/magic.h (and fs/*/ for the rest).
  struct Known {
    uint64_t magic;
    const char* name;
  };
  static const Known kNetwork[] = {
      {0x6969, "NFS"},      {0x517B, "SMB"},      {0xFF534D42, "CIFS"},   {0xFE534D42, "SMB2"},
      {0x65735546, "FUSE"}, {0x00C36400, "Ceph"}, {0x5346414F, "AFS"},    {0x73757245, "Coda"},
      {0x01021997, "9p"},   {0x47504653, "GPFS"}, {0x0BD00BD0, "Lustre"}, {0x013111A8, "IBRIX"},
      {0x6B414653, "kAFS"}, {0x564C, "NCP"},      {0x19830326, "BeeGFS"},
  };
  for (const Known& k : kNetwork) {
    if ((f_type & 0xFFFFFFFFu) == k.magic) return k.name;
  }
  return "";
}

absl::StatusOr<std::string> NetworkFilesystemOf(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0) return absl::NotFoundError(Errno("cannot stat folder", dir));
  return NetworkFilesystemName(static_cast<uint64_t>(fs.f_type));
}

absl::StatusOr<std::unique_ptr<DbOwnerLock>> DbOwnerLock::Acquire(const std::string& db,
                                                                  const std::string& address) {
  const std::string lock_path = LockPath(db), folder = FolderOf(db);
  absl::StatusOr<std::string> network = NetworkFilesystemOf(folder);
  if (!network.ok()) return network.status();
  if (!network->empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", db, " lies on a network filesystem (", *network,
        "): a coordinator's database must be on a local disk (SQLite's WAL mode needs every "
        "process on one host, and a lock there cannot keep two coordinators apart); move it, "
        "e.g. --db /var/lib/hilnas/",
        std::filesystem::path(db).filename().string()));
  }
  // O_CLOEXEC: a child the coordinator starts (an evaluator, sbatch) must
  // not inherit the descriptor and keep the lock after the coordinator dies.
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(Errno("cannot open lock file", lock_path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string text = ReadAll(fd);
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", db, " is owned by another coordinator: ", Parse(text).ToString(), " (lock ",
          lock_path, "). Stop that one first, or give this one another --db"));
    }
    errno = err;
    return absl::UnavailableError(Errno("cannot lock", lock_path));
  }
  DbOwnerInfo info;
  info.pid = getpid();
  info.host = HostName();
  info.address = address;
  info.since_unix_ms = absl::ToUnixMillis(absl::Now());
  std::unique_ptr<DbOwnerLock> lock(new DbOwnerLock(fd, lock_path, std::move(info)));
  if (absl::Status s = lock->Write(); !s.ok()) return s;
  return lock;
}

DbOwnerLock::~DbOwnerLock() { close(fd_); }

absl::Status DbOwnerLock::SetAddress(const std::string& address) {
  info_.address = address;
  return Write();
}

absl::Status DbOwnerLock::Write() {
  const std::string text = Serialize(info_);
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(Errno("cannot write the owner's details to", path_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DbOwnerInfo>> DbOwnerLock::Owner(const std::string& db) {
  const std::string lock_path = LockPath(db);
  const int fd = open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<DbOwnerInfo>();
    return absl::PermissionDeniedError(Errno("cannot open lock file", lock_path));
  }
  std::optional<DbOwnerInfo> owner;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    flock(fd, LOCK_UN);
  } else if (errno == EWOULDBLOCK) {
    owner = Parse(ReadAll(fd));
  }
  close(fd);
  return owner;
}

}  // namespace hilnas
