#include "engine/elastic_kv.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tokenmill {

ElasticKv::ElasticKv(KvCacheManager& kv, ReleaseKv release, std::unique_ptr<KvMemoryShare> share,
                     std::vector<int64_t> group_block_bytes)
    : kv_(kv),
      release_(std::move(release)),
      share_(std::move(share)),
      group_block_bytes_(std::move(group_block_bytes)) {
  TM_CHECK_EQ(static_cast<int>(group_block_bytes_.size()), kv_.num_groups());
  for (int group = 0; group < kv_.num_groups(); ++group) {
    kv_.MakeElastic(group, [share = share_.get(), group, bytes = group_block_bytes_[group]](
                               int blocks, int needed) {
      return share->TakeBlocks(group, blocks, needed, bytes);
    });
  }
}

void ElasticKv::GiveBack() {
  int64_t asked = share_->BytesAsked();
  if (asked <= 0) return;
  for (int group = 0; group < kv_.num_groups() && asked > 0; ++group) {
    const int64_t bytes = group_block_bytes_[static_cast<size_t>(group)];
    const int top = kv_.pool(group).active_blocks();
    const int wanted = static_cast<int>((asked + bytes - 1) / bytes);
    const int given = kv_.ShrinkTop(group, wanted, wanted);
    if (given == 0) continue;
    // The pool no longer has them: their memory goes whatever the release says.
    if (const Status released = release_(group, top - given, top); !released.ok()) {
      spdlog::warn("KV blocks given back but their memory not released: {}",
                   released.ToString());
    }
    share_->GiveBlocks(given, bytes);
    asked -= given * bytes;
  }
}

}  // namespace tokenmill
