// The n > 1 fan-out: a request with n sequences runs as n scheduler requests with the ids
// id..id+n-1, sequence i sampling with sampling.sequence_index + i. Sequences 1..n-1 are
// held back until sequence 0 has computed the prompt, so that the prefix cache serves them
// its full blocks; and the group is kept while any of its sequences is live, so that an abort
// of the request's id reaches them all. Engine thread only.
#pragma once

#include <chrono>
#include <unordered_map>
#include <vector>

#include "engine/generate_request.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"

namespace tokenmill {

// The scheduler requests of `request`'s n sequences under the ids id..id+n-1 (its seed set).
std::vector<NewRequest> SplitIntoSequences(RequestId id, const GenerateRequest& request,
                                           std::chrono::steady_clock::time_point arrival_time);

class SequenceFanOut {
 public:
  // Without a prefix cache, held sequences have nothing to wait for.
  explicit SequenceFanOut(bool prefix_caching) : prefix_caching_(prefix_caching) {}

  bool waits_for_prompt() const { return prefix_caching_; }

  // Holds `rest` (sequences 1..n-1 of the request `first_id`) back; the group's n sequences
  // count as live.
  void Hold(RequestId first_id, std::vector<NewRequest> rest);

  // The held sequences whose wait is over, in the order they were held: their sequence 0
  // has computed its prompt or is no longer in `scheduler`.
  std::vector<NewRequest> TakeReleased(const Scheduler& scheduler);

  // Forgets the held sequences of the request `first_id` (they are being aborted).
  void DropHeld(RequestId first_id);

  // n when `id` is the first id of a request with n > 1 that still has a live sequence,
  // else 0.
  int GroupSize(RequestId id) const;

  // A sequence of the request `first_id` ended; the group goes with its last one. A no-op
  // for a request with n == 1.
  void SequenceEnded(RequestId first_id);

  // Sequences held back, for the waiting count.
  int num_held() const;

 private:
  // Sequences 1..n-1 of a request, waiting for sequence 0 (first_id) to fill the cache.
  struct Held {
    RequestId first_id;
    std::vector<NewRequest> sequences;
  };
  struct Group {
    int n;
    int num_live;  // sequences not finished yet
  };

  bool prefix_caching_;
  std::vector<Held> held_;
  std::unordered_map<RequestId, Group> groups_;  // by their first id
};

}  // namespace tokenmill
