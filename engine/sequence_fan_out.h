// The n > 1 fan-out: a request with n sequences runs as n scheduler requests with the ids
// id..id+n-1, sequence i sampling with sampling.sequence_index + i. They are queued together;
// the scheduler holds sequences 1..n-1 back while sequence 0 computes the prompt blocks they
// would share (Scheduler::WaitsForSharedPrefill), so the prefix cache serves them its full
// blocks. The group is kept while any of its sequences is live, so that an abort of the
// request's id reaches them all. Engine thread only.
#pragma once

#include <chrono>
#include <unordered_map>
#include <vector>

#include "engine/generate_request.h"
#include "scheduler/request.h"

namespace tokenmill {

// The scheduler requests of `request`'s n sequences under the ids id..id+n-1 (its seed set).
std::vector<NewRequest> SplitIntoSequences(RequestId id, const GenerateRequest& request,
                                           std::chrono::steady_clock::time_point arrival_time);

class SequenceFanOut {
 public:
  // The n > 1 sequences of the request `first_id` are live.
  void AddGroup(RequestId first_id, int n);

  // n when `id` is the first id of a request with n > 1 that still has a live sequence,
  // else 0.
  int GroupSize(RequestId id) const;

  // A sequence of the request `first_id` ended; the group goes with its last one. A no-op
  // for a request with n == 1.
  void SequenceEnded(RequestId first_id);

 private:
  struct Group {
    int n;
    int num_live;  // sequences not finished yet
  };

  std::unordered_map<RequestId, Group> groups_;  // by their first id
};

}  // namespace tokenmill
