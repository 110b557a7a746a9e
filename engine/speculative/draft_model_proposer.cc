#include "engine/speculative/draft_model_proposer.h"

#include <algorithm>
#include <string>

#include "engine/batch_inputs.h"
#include "engine/sampling/sampler.h"
#include "model/forward_input.h"

namespace tokenmill {
namespace {

StatusOr<std::vector<std::string_view>> TokenList(const Model& model) {
  return model.file().GetStringArray("tokenizer.ggml.tokens");
}

std::string Describe(const Model& model, size_t num_tokens) {
  std::string name = "model";
  if (StatusOr<std::string_view> n = model.file().GetString("general.name"); n.ok()) {
    name = std::string(*n);
  }
  return name + " (" + std::to_string(num_tokens) + " tokens)";
}

}  // namespace

Status CheckDraftVocabulary(const Model& target, const Model& draft) {
  TM_ASSIGN_OR_RETURN(std::vector<std::string_view> target_tokens, TokenList(target));
  StatusOr<std::vector<std::string_view>> draft_tokens = TokenList(draft);
  if (!draft_tokens.ok()) {
    return InvalidArgumentError("--draft-model has no token list (tokenizer.ggml.tokens): " +
                                draft_tokens.status().message());
  }
  const std::string both = "the draft model " + Describe(draft, draft_tokens->size()) +
                           " and the target " + Describe(target, target_tokens.size());
  if (*draft_tokens != target_tokens) {
    size_t first = 0;
    while (first < std::min(draft_tokens->size(), target_tokens.size()) &&
           (*draft_tokens)[first] == target_tokens[first]) {
      ++first;
    }
    return InvalidArgumentError(both + " have different vocabularies (first difference at id " +
                                std::to_string(first) +
                                "): give --draft-model a model with the target's tokenizer");
  }
  if (draft.config().n_vocab != target.config().n_vocab) {
    return InvalidArgumentError(both + " have outputs of different sizes (" +
                                std::to_string(draft.config().n_vocab) + " vs " +
                                std::to_string(target.config().n_vocab) +
                                "): give --draft-model a model with the target's vocabulary");
  }
  return OkStatus();
}

int DraftModelProposer::NumScratchBlocks(int max_requests, int max_drafts, int block_size) {
  // A request's table covers its verified tokens but one; its drafts reach max_drafts - 1
  // positions further.
  return max_requests * ((max_drafts + block_size - 1) / block_size + 1);
}

DraftModelProposer::DraftModelProposer(const Model& draft, std::unique_ptr<ForwardBackend> backend,
                                       int64_t num_blocks, int block_size, int max_requests,
                                       int max_drafts,
                                       std::vector<TokenId> end_of_generation_ids)
    : draft_(draft),
      backend_(std::move(backend)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_scratch_blocks_(NumScratchBlocks(max_requests, max_drafts, block_size)),
      sampler_(std::move(end_of_generation_ids)) {}

Status DraftModelProposer::ReleaseKv(int64_t first_block, int64_t end_block) {
  for (int group = 0; group < NumKvGroups(draft_.config()); ++group) {
    TM_RETURN_IF_ERROR(backend_->ReleaseKv(group, first_block, end_block));
  }
  return OkStatus();
}

StatusOr<std::vector<Proposal>> DraftModelProposer::Propose(
    std::span<const ProposalRequest> requests) {
  // Pass 0 catches each request up over its tokens without draft K/V and drafts one token;
  // pass j > 0 feeds draft j - 1 of the requests that want more.
  std::vector<Proposal> proposals(requests.size());
  std::vector<std::vector<BlockId>> tables(requests.size());
  int next_scratch = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest& r = requests[i];
    const int length = static_cast<int>(r.token_ids.size());
    // Written positions reach length + num_drafts - 2: the last draft needs no K/V.
    const int kv_length = length + r.num_drafts - 1;
    tables[i].assign(r.block_table.begin(), r.block_table.end());
    while (static_cast<int>(tables[i].size()) * block_size_ < kv_length) {
      if (next_scratch == num_scratch_blocks_) {
        return InternalError("the draft model ran out of scratch blocks: too many drafts");
      }
      tables[i].push_back(static_cast<BlockId>(num_blocks_ + next_scratch++));
    }
  }
  const size_t n_vocab = static_cast<size_t>(draft_.config().n_vocab);
  const int max_drafts = std::max_element(requests.begin(), requests.end(),
                                          [](const ProposalRequest& a, const ProposalRequest& b) {
                                            return a.num_drafts < b.num_drafts;
                                          })->num_drafts;
  for (int pass = 0; pass < max_drafts; ++pass) {
    SchedulerOutput step;
    std::vector<size_t> members;
    for (size_t i = 0; i < requests.size(); ++i) {
      const ProposalRequest& r = requests[i];
      if (pass >= r.num_drafts) continue;
      const int length = static_cast<int>(r.token_ids.size());
      ScheduledRequest s;
      s.id = r.id;
      if (pass == 0) {
        const auto it = num_computed_.find(r.id);
        s.num_computed_tokens = it == num_computed_.end() ? 0 : std::min(it->second, length - 1);
        s.token_ids.assign(r.token_ids.begin() + s.num_computed_tokens, r.token_ids.end());
      } else {
        s.num_computed_tokens = length + pass - 1;
        s.token_ids = {proposals[i].token_ids.back()};
      }
      s.num_new_tokens = static_cast<int>(s.token_ids.size());
      s.num_logits = 1;
      s.block_table = tables[i];
      step.num_batched_tokens += s.num_new_tokens;
      step.requests.push_back(std::move(s));
      members.push_back(i);
    }
    const BatchInputs in = BuildBatchInputs(step, block_size_, NumKvGroups(draft_.config()));
    logits_.resize(in.logit_rows.size() * n_vocab);
    TM_RETURN_IF_ERROR(backend_->Run({in.token_ids, in.batch(), in.logit_rows}, logits_));
    for (size_t m = 0; m < members.size(); ++m) {
      const ProposalRequest& r = requests[members[m]];
      Proposal& proposal = proposals[members[m]];
      // The request's context for this draft: its tokens, then the drafts so far.
      std::vector<TokenId> tokens(r.token_ids.begin(), r.token_ids.end());
      tokens.insert(tokens.end(), proposal.token_ids.begin(), proposal.token_ids.end());
      const std::span<const TokenId> all(tokens);
      const size_t num_prompt = static_cast<size_t>(r.num_prompt_tokens);
      const SamplingContext context{.params = r.sampling,
                                    .prompt_token_ids = all.first(num_prompt),
                                    .output_token_ids = all.subspan(num_prompt)};
      q_.resize(n_vocab);
      sampler_.ComputeProbs(std::span<const float>(logits_).subspan(m * n_vocab, n_vocab),
                            context, q_);
      proposal.token_ids.push_back(Sampler::Draw(q_, context, RngStream::kSample));
      if (!r.sampling->greedy()) proposal.probs.insert(proposal.probs.end(), q_.begin(), q_.end());
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    // Verified tokens whose draft K/V now sit in the request's own blocks.
    const int length = static_cast<int>(requests[i].token_ids.size());
    num_computed_[requests[i].id] =
        std::min(length, static_cast<int>(requests[i].block_table.size()) * block_size_);
  }
  return proposals;
}

}  // namespace tokenmill
