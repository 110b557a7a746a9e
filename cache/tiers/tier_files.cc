#include "cache/tiers/tier_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tokenmill::tier_files {

namespace {

int WriteAll(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A write past RLIMIT_FSIZE is short first, then EFBIG (SIGXFSZ ignored): loop to see it.
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

int MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return 0;
  const int error = errno;
  struct stat st {};
  if (error == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return 0;
  return error == EEXIST ? ENOTDIR : error;
}

int MakeDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const int error = MakeDir(path.substr(0, slash));
    if (error != 0) return error;
  }
  return MakeDir(path);
}

int WriteFileAtomically(const std::string& dir, const std::string& temp_name,
                        const std::string& name, std::span<const std::span<const uint8_t>> pieces) {
  const std::string temp = dir + "/" + temp_name;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  int error = 0;
  for (const auto piece : pieces) {
    error = WriteAll(fd, piece);
    if (error != 0) break;
  }
  // close can report a delayed write error (NFS, quotas): it counts.
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temp.c_str(), (dir + "/" + name).c_str()) != 0) error = errno;
  if (error != 0) ::unlink(temp.c_str());
  return error;
}

int ReadFile::Open(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) return errno;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return errno;
  size_ = st.st_size;
  regular_ = S_ISREG(st.st_mode);
  return 0;
}

void Prefetch(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
  ::close(fd);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

int ReadFile::ReadPrefix(size_t count, std::vector<uint8_t>* out) const {
  out->resize(count);
  size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, out->data() + done, count - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  return 0;
}

void ReadFile::Touch() const {
  // Fails on a read-only file system: the index still has the use, only a restart loses it.
  (void)::futimens(fd_, nullptr);
}

int ListDir(const std::string& path, std::vector<DirEntry>* out) {
  out->clear();
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return errno;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    DirEntry e;
    e.name = name;
    e.is_dir = S_ISDIR(st.st_mode);
    e.is_file = S_ISREG(st.st_mode);
    e.size = st.st_size;
    e.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    out->push_back(std::move(e));
  }
  ::closedir(dir);
  return 0;
}

bool Remove(const std::string& path) { return ::unlink(path.c_str()) == 0 || errno == ENOENT; }

}  // namespace tokenmill::tier_files
