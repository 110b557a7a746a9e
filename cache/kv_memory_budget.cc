#include "cache/kv_memory_budget.h"

#include <algorithm>

#include "common/check.h"

namespace tokenmill {

std::shared_ptr<KvMemoryBudget> KvMemoryBudget::Create(int64_t total_bytes) {
  TM_CHECK_GE(total_bytes, 0);
  return std::shared_ptr<KvMemoryBudget>(new KvMemoryBudget(total_bytes));
}

int64_t KvMemoryBudget::Member::wanted() const {
  int64_t sum = 0;
  for (const int64_t want : wants) sum += want;
  return sum;
}

int64_t KvMemoryBudget::unclaimed_bytes() const {
  std::lock_guard lock(mutex_);
  return total_bytes_ - held_;
}

std::unique_ptr<KvMemoryShare> KvMemoryBudget::Join(std::function<void()> wake) {
  std::unique_ptr<KvMemoryShare> share(new KvMemoryShare(shared_from_this()));
  std::lock_guard lock(mutex_);
  members_.push_back(Member{.share = share.get(), .wake = std::move(wake), .held = 0, .wants = {}});
  return share;
}

KvMemoryBudget::Member& KvMemoryBudget::MemberOf(const KvMemoryShare* share) {
  const auto it = std::ranges::find(members_, share, &Member::share);
  TM_CHECK(it != members_.end()) << "a share of another budget";
  return *it;
}

void KvMemoryBudget::WakeOthers(const KvMemoryShare* share) {
  for (const Member& member : members_) {
    if (member.share != share && member.wake) member.wake();
  }
}

void KvMemoryBudget::WakeWanting() {
  for (const Member& member : members_) {
    if (member.wanted() > 0 && member.wake) member.wake();
  }
}

KvMemoryShare::~KvMemoryShare() {
  KvMemoryBudget& budget = *budget_;
  std::lock_guard lock(budget.mutex_);
  const auto it = std::ranges::find(budget.members_, this, &KvMemoryBudget::Member::share);
  budget.held_ -= it->held;
  const bool gave = it->held > 0;
  budget.members_.erase(it);
  if (gave) budget.WakeWanting();
}

int KvMemoryShare::TakeBlocks(int pool, int blocks, int needed, int64_t block_bytes) {
  TM_CHECK_GT(block_bytes, 0);
  TM_CHECK_GE(pool, 0);
  KvMemoryBudget& budget = *budget_;
  std::lock_guard lock(budget.mutex_);
  KvMemoryBudget::Member& member = budget.MemberOf(this);
  // What was given back for another share's ask is kept for it.
  int64_t available = budget.total_bytes_ - budget.held_;
  for (const KvMemoryBudget::Member& other : budget.members_) {
    if (other.share != this) available -= other.wanted();
  }
  const int granted =
      static_cast<int>(std::clamp<int64_t>(available / block_bytes, 0, std::max(blocks, 0)));
  member.held += granted * block_bytes;
  budget.held_ += granted * block_bytes;
  if (member.wants.size() <= static_cast<size_t>(pool)) member.wants.resize(pool + 1);
  int64_t& want = member.wants[static_cast<size_t>(pool)];
  const int64_t wanted = std::max(0, needed - granted) * block_bytes;
  const bool new_ask = wanted > want;
  want = wanted;
  if (new_ask) budget.WakeOthers(this);
  return granted;
}

void KvMemoryShare::GiveBlocks(int blocks, int64_t block_bytes) {
  if (blocks <= 0) return;
  KvMemoryBudget& budget = *budget_;
  std::lock_guard lock(budget.mutex_);
  KvMemoryBudget::Member& member = budget.MemberOf(this);
  const int64_t bytes = blocks * block_bytes;
  TM_CHECK_LE(bytes, member.held) << "a share gave back more than it holds";
  member.held -= bytes;
  budget.held_ -= bytes;
  budget.WakeWanting();
}

void KvMemoryShare::ClearWant() {
  std::lock_guard lock(budget_->mutex_);
  budget_->MemberOf(this).wants.clear();
}

int64_t KvMemoryShare::held_bytes() const {
  std::lock_guard lock(budget_->mutex_);
  return budget_->MemberOf(this).held;
}

int64_t KvMemoryShare::BytesAsked() const {
  const KvMemoryBudget& budget = *budget_;
  std::lock_guard lock(budget.mutex_);
  int64_t wanted = 0;
  for (const KvMemoryBudget::Member& member : budget.members_) {
    if (member.share != this) wanted += member.wanted();
  }
  return std::max<int64_t>(0, wanted - (budget.total_bytes_ - budget.held_));
}

void KvMemoryShare::set_wake(std::function<void()> wake) {
  std::lock_guard lock(budget_->mutex_);
  budget_->MemberOf(this).wake = std::move(wake);
}

}  // namespace tokenmill
