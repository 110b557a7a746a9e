// The disk tier's file system calls: POSIX, errno-returning, never throwing. A file appears
// under its final name whole or not at all (a temp file in the same directory, renamed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokenmill::tier_files {

// Suffix of files being written; any found at start are leftovers of a stopped writer.
inline constexpr std::string_view kTempSuffix = ".tmp";
inline constexpr std::string_view kBlockSuffix = ".kvb";

// mkdir(path, 0700); an existing directory is fine. 0 or errno.
int MakeDir(const std::string& path);

// mkdir -p, each directory made 0700. 0 or errno.
int MakeDirs(const std::string& path);

// Writes the pieces in order to dir/temp_name (O_CREAT | O_EXCL, 0600), then renames it to
// dir/name. 0 or the errno of the first failing call; on failure no temp file is left.
// No fsync: a file torn by a crash fails its checksum and is deleted when read.
int WriteFileAtomically(const std::string& dir, const std::string& temp_name,
                        const std::string& name, std::span<const std::span<const uint8_t>> pieces);

// An open file for reading (O_NOFOLLOW: a link is not a block file); closed on destruction.
class ReadFile {
 public:
  // 0 or errno (ENOENT: no such file).
  int Open(const std::string& path);
  ~ReadFile();
  int64_t size() const { return size_; }
  bool regular() const { return regular_; }
  // Reads bytes [0, count) (fewer when the file is shorter). 0 or errno.
  int ReadPrefix(size_t count, std::vector<uint8_t>* out) const;
  // Sets the modification time to now (the file's last use, kept across restarts).
  void Touch() const;

 private:
  int fd_ = -1;
  int64_t size_ = 0;
  bool regular_ = false;
};

// Asks the kernel to start reading the whole file now (posix_fadvise WILLNEED), so that the
// reads that follow find it in memory; nothing when it cannot be opened.
void Prefetch(const std::string& path);

struct DirEntry {
  std::string name;
  bool is_dir = false;
  bool is_file = false;
  int64_t size = 0;
  int64_t mtime_ns = 0;  // since the epoch
};
// The entries of a directory (no . and ..), each lstat'ed. errno on failure to open it.
int ListDir(const std::string& path, std::vector<DirEntry>* out);

// unlink(path): true when it is gone (removed now or already missing).
bool Remove(const std::string& path);

}  // namespace tokenmill::tier_files
