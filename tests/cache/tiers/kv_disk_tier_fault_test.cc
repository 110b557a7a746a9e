// Every way a block file goes bad, and directories that cannot be used: the tier serves the
// verified prefix only, counts and deletes the bad file, and never crashes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cache/tiers/kv_disk_tier.h"
#include "tests/cache/tiers/tier_test_util.h"

namespace tokenmill::testing {
namespace kv_disk_tier_fault_test {

// Offsets in a block file (cache/tiers/block_file.h) with a salt of one byte.
constexpr size_t kSaltSizeOffset = 96;
constexpr size_t kTokenCountOffset = 100 + 1;
constexpr size_t kFirstTokenOffset = kTokenCountOffset + 4;
constexpr size_t kPayloadSizeOffset = kFirstTokenOffset + 4 * kBlockSize;

class KvDiskTierFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = Config(dir_.path());
    Open();
    chain_ = MakeChain(tier_->root(), "s", 3, 7);
    WriteChain(*tier_, chain_);
    FlushAll(*tier_);
    ASSERT_EQ(tier_->Stats().writes, 3);
    tier_->TakeEvents();
  }
  void Open() {
    tier_.reset();
    tier_ = KvDiskTier::Open(config_, [] {});
    FlushAll(*tier_);
  }
  std::string Path(int block) const { return BlockPath(config_, chain_.digests[block]); }
  void Patch(int block, size_t offset, std::vector<uint8_t> bytes) {
    std::vector<uint8_t> file = ReadBytes(Path(block));
    ASSERT_LE(offset + bytes.size(), file.size());
    std::copy(bytes.begin(), bytes.end(), file.begin() + static_cast<std::ptrdiff_t>(offset));
    WriteBytes(Path(block), file);
  }
  void Truncate(int block, size_t size) { std::filesystem::resize_file(Path(block), size); }

  // Loads the chain: only blocks [0, good) come back, the file at `good` was refused (one
  // reject under `reason`), deleted and reported removed; a second load does not see it again.
  void ExpectRefusedAt(int good, int64_t KvDiskTierStats::*reason,
                       const std::vector<KvTierBlockRef>& refs, const std::string& salt) {
    const KvTierLoad load = LoadNow(*tier_, salt, refs);
    ASSERT_EQ(static_cast<int>(load.payloads.size()), good);
    for (int i = 0; i < good; ++i) EXPECT_EQ(load.payloads[i], chain_.Payload(i));
    KvDiskTierStats stats = tier_->Stats();
    EXPECT_EQ(stats.rejects, 1);
    EXPECT_EQ(stats.*reason, 1);
    EXPECT_EQ(stats.rejects_corrupt + stats.rejects_truncated + stats.rejects_mismatch, 1);
    EXPECT_FALSE(std::filesystem::exists(Path(good)));
    EXPECT_FALSE(tier_->Contains(chain_.digests[good]));
    const std::vector<KvTierEvent> events = tier_->TakeEvents();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_FALSE(events[0].stored);
    EXPECT_EQ(events[0].hash, chain_.Hash(good));
    EXPECT_EQ(static_cast<int>(LoadNow(*tier_, salt, refs).payloads.size()), good);
    EXPECT_EQ(tier_->Stats().rejects, 1);
  }
  void ExpectRefusedAt(int good, int64_t KvDiskTierStats::*reason) {
    ExpectRefusedAt(good, reason, chain_.Refs(), chain_.salt);
  }

  TempDir dir_;
  KvDiskTierConfig config_;
  std::unique_ptr<KvDiskTier> tier_;
  Chain chain_;
};

TEST_F(KvDiskTierFaultTest, TruncatedFiles) {
  Truncate(1, std::filesystem::file_size(Path(1)) - 10);
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_truncated);
}

TEST_F(KvDiskTierFaultTest, TruncatedInsideTheHeader) {
  Truncate(0, 50);
  ExpectRefusedAt(0, &KvDiskTierStats::rejects_truncated);
}

TEST_F(KvDiskTierFaultTest, BitFlipInThePayload) {
  const size_t size = std::filesystem::file_size(Path(1));
  std::vector<uint8_t> file = ReadBytes(Path(1));
  Patch(1, size - 40, {static_cast<uint8_t>(file[size - 40] ^ 0x10)});
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, BitFlipInTheHeader) {
  std::vector<uint8_t> file = ReadBytes(Path(1));
  Patch(1, kFirstTokenOffset, {static_cast<uint8_t>(file[kFirstTokenOffset] ^ 1)});
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, BitFlipInTheMagic) {
  Patch(2, 0, {'X'});
  ExpectRefusedAt(2, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, FileSwappedWithAnother) {
  std::filesystem::rename(Path(2), Path(1));  // block 2's file under block 1's name
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_mismatch);
}

TEST_F(KvDiskTierFaultTest, AnotherIdentitysFile) {
  const KvDiskTierConfig other_config = Config(dir_.path(), "model-b");
  auto other = KvDiskTier::Open(other_config, [] {});
  const Chain foreign = MakeChain(other->root(), "s", 3, 7);  // the same tokens and salt
  WriteChain(*other, foreign);
  FlushAll(*other);
  std::filesystem::copy_file(BlockPath(other_config, foreign.digests[1]), Path(1),
                             std::filesystem::copy_options::overwrite_existing);
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_mismatch);
}

TEST_F(KvDiskTierFaultTest, WrongSalt) {
  ExpectRefusedAt(0, &KvDiskTierStats::rejects_mismatch, chain_.Refs(), "t");
}

TEST_F(KvDiskTierFaultTest, WrongTokens) {
  std::vector<KvTierBlockRef> refs = chain_.Refs();
  ++refs[1].tokens[3];
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_mismatch, refs, chain_.salt);
}

TEST_F(KvDiskTierFaultTest, GarbageFile) {
  std::vector<uint8_t> garbage(700);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 31 + 5);
  WriteBytes(Path(1), garbage);
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, AbsurdSaltLength) {
  Patch(1, kSaltSizeOffset, {0xff, 0xff, 0xff, 0xff});
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, AbsurdTokenCount) {
  Patch(1, kTokenCountOffset, {0x00, 0xca, 0x9a, 0x3b});  // 1e9
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_corrupt);
}

TEST_F(KvDiskTierFaultTest, AbsurdPayloadSize) {
  Patch(1, kPayloadSizeOffset, {0, 0, 0, 0, 0, 1, 0, 0});  // 1 TB
  ExpectRefusedAt(1, &KvDiskTierStats::rejects_truncated);
}

TEST_F(KvDiskTierFaultTest, BadFilesFoundAtStartAreDeleted) {
  const std::string fan = std::filesystem::path(Path(0)).parent_path().string();
  const std::string id_dir = std::filesystem::path(fan).parent_path().string();
  Truncate(0, 60);
  Patch(1, kSaltSizeOffset, {0xff, 0xff, 0xff, 0xff});
  std::filesystem::rename(Path(2), std::filesystem::path(Path(2)).parent_path() /
                                       (DigestHex(chain_.digests[0]).substr(0, 2) + "x"));
  WriteBytes(fan + "/" + DigestHex(chain_.digests[0]) + ".1234-5.tmp", {1, 2, 3});
  WriteBytes(id_dir + "/identity.77.tmp", {1});
  WriteBytes(fan + "/notes.txt", {1, 2});
  WriteBytes(config_.dir + "/model-identity.cache", {1, 2});  // not the tier's: kept
  Open();
  const KvDiskTierStats stats = tier_->Stats();
  EXPECT_EQ(stats.blocks, 0);
  EXPECT_EQ(stats.rejects_truncated, 1);
  EXPECT_EQ(stats.rejects_corrupt, 3);  // absurd header, two names that are no block's
  EXPECT_TRUE(tier_->TakeEvents().empty());
  std::vector<std::string> files = FilesUnder(config_.dir);
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{
                       std::filesystem::path(id_dir).filename().string() + "/identity",
                       "model-identity.cache"}));
  EXPECT_TRUE(LoadNow(*tier_, chain_.salt, chain_.Refs()).payloads.empty());
}

TEST(KvDiskTierUnusableTest, ADirectoryUnderARegularFileTurnsTheTierOff) {
  TempDir dir;
  WriteBytes(dir.path() + "/file", {1});
  KvDiskTierConfig config = Config(dir.path());
  config.dir = dir.path() + "/file/kv";
  auto tier = KvDiskTier::Open(config, [] {});
  FlushAll(*tier);
  EXPECT_FALSE(tier->Stats().enabled);
  const Chain chain = MakeChain(tier->root(), "s", 2, 1);
  WriteChain(*tier, chain);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().dropped_writes, 2);
  EXPECT_EQ(tier->CountPresent(chain.digests, 0), 0);
  EXPECT_TRUE(LoadNow(*tier, chain.salt, chain.Refs()).payloads.empty());
  EXPECT_EQ(tier->Purge(""), 0);
  EXPECT_EQ(tier->Stats().read_failures, 0);
}

// A child process with RLIMIT_FSIZE below a block file's size (and SIGXFSZ ignored, as the
// server does): writes fail with EFBIG, the tier pauses writes, loads go on, no temp file is
// left. Returns the number of failed checks as its exit status.
int FullDiskChild(const std::string& root_dir) {
  int failures = 0;
  const auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "full disk child: %s\n", what);
      ++failures;
    }
  };
  ::signal(SIGXFSZ, SIG_IGN);
  const KvDiskTierConfig config = Config(root_dir);
  auto tier = KvDiskTier::Open(config, [] {});
  const Chain before = MakeChain(tier->root(), "s", 3, 3);
  WriteChain(*tier, before);
  FlushAll(*tier);
  check(tier->Stats().writes == 3, "the first writes landed");
  const rlimit limit{200, 200};  // a block file is about 400 bytes
  check(::setrlimit(RLIMIT_FSIZE, &limit) == 0, "setrlimit");
  // The first write fails, evicts the least recently used file (block 0 of `before`), fails
  // again and pauses writes: the next two are dropped.
  WriteChain(*tier, MakeChain(tier->root(), "s", 3, 4));
  FlushAll(*tier);
  const KvDiskTierStats stats = tier->Stats();
  check(stats.write_failures == 1, "one failed write, then a pause");
  check(stats.evictions == 1, "one file evicted to make room");
  check(stats.dropped_writes == 2, "the writes during the pause dropped");
  check(!stats.enabled, "paused");
  check(stats.writes == 3, "no more writes");
  std::vector<KvTierBlockRef> refs = before.Refs();
  refs.erase(refs.begin());
  const KvTierLoad load = LoadNow(*tier, before.salt, refs);
  check(load.payloads.size() == 2 && load.payloads[0] == before.Payload(1) &&
            load.payloads[1] == before.Payload(2),
        "loads go on");
  for (const std::string& file : FilesUnder(config.dir)) {
    check(!file.ends_with(".tmp"), "a temp file left");
  }
  check(FilesUnder(config.dir).size() == 3, "identity and two blocks");
  return failures;
}

TEST(KvDiskTierUnusableTest, AFullDiskPausesWritesAndLoadsGoOn) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(std::min(FullDiskChild(dir.path()), 100));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks in the child (its stderr says which)";
}

// A child process that gives its directory to `nobody`, makes it read-only to its owner and
// becomes that user (as root, permissions stop nothing): the next write fails with EACCES, the
// tier writes no more (for good), loads go on. Returns the number of failed checks.
int ReadOnlyChild(const std::string& root_dir) {
  int failures = 0;
  const auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "read-only child: %s\n", what);
      ++failures;
    }
  };
  const KvDiskTierConfig config = Config(root_dir);
  auto tier = KvDiskTier::Open(config, [] {});
  const Chain before = MakeChain(tier->root(), "s", 2, 5);
  WriteChain(*tier, before);
  FlushAll(*tier);
  check(tier->Stats().writes == 2, "the first writes landed");
  constexpr uid_t kNobody = 65534;
  check(::chown(config.dir.c_str(), kNobody, kNobody) == 0, "chown");
  for (const auto& entry : std::filesystem::recursive_directory_iterator(config.dir)) {
    check(::chown(entry.path().c_str(), kNobody, kNobody) == 0, "chown");
    if (entry.is_directory())
      std::filesystem::permissions(entry.path(), std::filesystem::perms(0500));
  }
  // setresuid changes every thread's ids (glibc), the tier's too.
  check(::setresgid(kNobody, kNobody, kNobody) == 0 && ::setresuid(kNobody, kNobody, kNobody) == 0,
        "setresuid");
  WriteChain(*tier, MakeChain(tier->root(), "s", 3, 6));
  FlushAll(*tier);
  KvDiskTierStats stats = tier->Stats();
  check(stats.write_failures == 1, "one failed write");
  check(stats.dropped_writes == 2, "the later writes dropped");
  check(!stats.enabled, "writes off");
  const KvTierLoad load = LoadNow(*tier, before.salt, before.Refs());
  check(load.payloads.size() == 2 && load.payloads[1] == before.Payload(1), "loads go on");
  for (const std::string& file : FilesUnder(config.dir)) {
    check(!file.ends_with(".tmp"), "a temp file left");
  }
  return failures;
}

TEST(KvDiskTierUnusableTest, AReadOnlyDirectoryStopsWritesAndLoadsGoOn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(std::min(ReadOnlyChild(dir.path()), 100));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks in the child (its stderr says which)";
}

}  // namespace kv_disk_tier_fault_test
}  // namespace tokenmill::testing
