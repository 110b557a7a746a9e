// How many tokens to draft for one request: the k that maximizes the step's expected tokens
// per unit of cost, from the request's measured acceptance (an exponential moving average of
// accepted / proposed) and a cost model of the step (docs/benchmarks.md, "Speculative
// decoding"): a step of R rows costs 1 + row_cost x (R - 1) one-row steps. With acceptance a,
// k drafts yield 1 + a + ... + a^k tokens. So speculation turns itself down as acceptance
// falls or the batch grows (its B - 1 other rows make a draft row's share of the cost larger
// relative to what it can add). At k = 0 a one-token probe every kProbeInterval steps lets a
// request whose text turned repetitive win speculation back.
#pragma once

namespace tokenmill {

class AdaptiveK {
 public:
  static constexpr double kSmoothing = 0.3;  // weight of the latest verification
  static constexpr int kProbeInterval = 16;  // steps at k = 0 between one-token probes

  // The drafts to ask for next, in [0, k_max], for a step of `batch_size` sequences.
  int Next(int k_max, double row_cost, int batch_size);
  // One verification: `accepted` of `proposed` (> 0) drafts stood.
  void Observe(int proposed, int accepted);
  double acceptance() const { return acceptance_; }

  // Expected tokens per unit of cost of a step of `batch_size` sequences when this request
  // drafts k tokens accepted each with probability `acceptance` (the others draft none).
  static double TokensPerCost(int k, double acceptance, double row_cost, int batch_size);

 private:
  double acceptance_ = 1.0;  // optimistic: a new request starts at its best k
  int steps_at_zero_ = 0;
};

}  // namespace tokenmill
