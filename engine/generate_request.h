// What a client asks the engine for: a prompt, how to sample, when to stop, and where the
// events go (Engine::Submit, EngineCore::Add).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/types.h"
#include "engine/embedding_pooler.h"
#include "engine/generate_output.h"
#include "grammar/compiler.h"
#include "scheduler/request.h"
#include "text/chat/output_parser.h"

namespace tokenmill {

// Beam search (GenerateRequest::beam_search), vLLM's: each step every live beam's 2n most
// likely next tokens are candidates; those ending in an end-of-generation or stop token id
// become finished hypotheses (unless ignore_eos), the n best of the rest the next beams; after
// max_tokens steps the n best of all hypotheses are the result. A hypothesis's score is
// cumulative_logprob / length ** length_penalty, the length counting the prompt and not an
// ending end-of-generation token.
struct BeamSearchParams {
  float length_penalty = 1.0f;
};

struct GenerateRequest {
  std::vector<TokenId> prompt_token_ids;
  // Stop conditions and the sampler's parameters (scheduler/request.h). An unset seed is
  // drawn at random when the engine adds the request.
  SamplingParams sampling;
  // Sequences to generate from the prompt; sequence i draws with sampling.sequence_index + i
  // (so a seed gives reproducible, distinct sequences). They share the prompt's KV
  // blocks. Every event carries its sequence's index; each sequence ends with its own final
  // event. The request takes the ids id..id+n-1 in the engine.
  int n = 1;
  // Set: beam search of width n instead of n sampled sequences (sampling must be greedy and
  // neutral: request_validation.h). Sequence i's one final event is the i-th best hypothesis,
  // all its tokens at once, with its cumulative_logprob.
  std::optional<BeamSearchParams> beam_search;
  // Finish (stop) when the generated text contains one of these; the text streamed stops
  // right before it, even when it spans several tokens. Each must be non-empty.
  std::vector<std::string> stop_strings;
  // Smaller runs first (0 by default); ties go to the earlier arrival.
  int priority = 0;
  // Who asked ("" for an anonymous caller): the scheduler shares the KV pool fairly between
  // tenants (scheduler/scheduler.h). Only a trusted edge sets it (the server believes it
  // from an authenticated gateway alone).
  std::string tenant;
  // Keeps tenants apart in the prefix cache: requests share cached prefixes only when their
  // salts are equal (the server derives it from the tenant and the client's salt).
  std::string cache_salt;
  // Set: generate past the context length, keeping sink and recent tokens' K/V
  // (scheduler/request.h); usage.evicted_tokens counts the tokens dropped.
  std::optional<KvWindow> kv_window;
  // A predicted output's tokens (OpenAI's Predicted Outputs): n-gram speculation drafts from
  // them as from the prompt, so a rewrite of this text verifies several tokens a step. The
  // output does not depend on them. At most max_model_len of them, inside the vocabulary.
  std::vector<TokenId> predicted_token_ids;
  // Set: structured output. Every sequence follows this grammar (compiled off the engine
  // thread, for this model's vocabulary) with a matcher of its own, and finishes (stop) when
  // the grammar ends; max_tokens may cut it first (length). Not with min_tokens.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // With `grammar`: the constraint starts right after the output first holds these tokens
  // (a reasoning model's "</think>", when the prompt opened its reasoning), so what comes
  // before them is free. Empty: from the first token.
  std::vector<TokenId> grammar_starts_after;
  // With grammar_starts_after: the tokens a model opens its reasoning with ("<think>"), when
  // it may do so itself. The output may then begin with them (and its reasoning is free up
  // to grammar_starts_after) or with what the grammar allows (constrained from the first
  // token). Empty: the output starts inside the reasoning.
  std::vector<TokenId> grammar_reasoning_opens;
  // Set: each sequence's output is parsed as it streams (chat output: reasoning, content,
  // tool calls; text/chat/output_parser.h); sequence i's tool-call ids draw from seed + i.
  // Its events then carry the content as text, beside the reasoning and the tool-call
  // deltas. A sequence whose turn is over (its one call complete, without parallel calls)
  // finishes there like at a stop string, and an output that ends with calls finishes as
  // kToolCalls rather than kStop.
  std::optional<OutputParserOptions> output_parsing;
  // Control tokens whose text the output carries (a tool-call parser's markers, such as
  // <|python_tag|> or [TOOL_CALLS]); other control tokens produce no text.
  std::vector<TokenId> rendered_control_tokens;
  // Set: an embedding instead of a generation (the server's Embed). The prompt is computed
  // in the batch like any other, nothing is sampled, and the one final event (kStop) carries
  // the prompt's final hidden states pooled as this says (GenerateOutput::embedding). Only
  // with n = 1 and none of beam search, kv_window, prompt_logprobs, a grammar, output parsing,
  // stop strings or a prediction (request_validation.h).
  std::optional<EmbeddingParams> embedding;
  // The LoRA adapter the request runs with: 0, none; else the id of one the engine holds
  // (EngineConfig::lora_adapters' or Engine::AddLora's).
  // Its cached prefixes are its adapter's alone: the engine adds the adapter's tensor digest to
  // its cache_salt (so a tier on disk never serves them to another adapter file either).
  int lora = 0;
  // Receives every event of this request, on the engine thread; must not block (see
  // generate_output.h). Required.
  OutputSink sink;
};

}  // namespace tokenmill
