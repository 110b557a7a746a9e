#include "gateway/api/openai/prompt_logprobs.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace tokenmill::gateway {

using nlohmann::json;

std::vector<TokenLogprobText> EchoedPromptLogprobs(const std::vector<v1::TokenLogprobs>& entries,
                                                   uint32_t top) {
  std::vector<TokenLogprobText> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const v1::TokenLogprobs& entry = entries[i];
    TokenLogprobText text{.token = entry.chosen().text(),
                          .logprob = entry.chosen().logprob(),
                          .top = {},
                          .no_logprob = i == 0};
    for (int k = 0; k < entry.top_size() && static_cast<uint32_t>(k) < top; ++k) {
      text.top.emplace_back(entry.top(k).text(), entry.top(k).logprob());
    }
    out.push_back(std::move(text));
  }
  return out;
}

json PromptLogprobsJson(const std::vector<v1::TokenLogprobs>& entries, uint32_t top) {
  json list = json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i == 0) {
      list.push_back(nullptr);
      continue;
    }
    const v1::TokenLogprobs& entry = entries[i];
    json position = json::object();
    // The server's rank in the whole vocabulary; a server without one: known in the top only.
    json chosen_rank = entry.chosen().rank() > 0 ? json(entry.chosen().rank()) : json(nullptr);
    for (int k = 0; k < entry.top_size() && static_cast<uint32_t>(k) < top; ++k) {
      const v1::TokenLogprob& t = entry.top(k);
      if (t.token_id() == entry.chosen().token_id() && chosen_rank.is_null()) chosen_rank = k + 1;
      position[std::to_string(t.token_id())] = {
          {"logprob", t.logprob()}, {"rank", k + 1}, {"decoded_token", t.text()}};
    }
    position[std::to_string(entry.chosen().token_id())] = {
        {"logprob", entry.chosen().logprob()},
        {"rank", chosen_rank},
        {"decoded_token", entry.chosen().text()}};
    list.push_back(std::move(position));
  }
  return list;
}

std::vector<size_t> BestCandidates(const std::vector<ChoiceResult>& candidates, uint32_t n) {
  std::vector<double> score(candidates.size(), 0.0);
  for (size_t i = 0; i < candidates.size(); ++i) {
    for (const TokenLogprobText& t : candidates[i].logprobs) score[i] += t.logprob;
  }
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&score](size_t a, size_t b) { return score[a] > score[b]; });
  order.resize(std::min<size_t>(order.size(), n));
  return order;
}

}  // namespace tokenmill::gateway
