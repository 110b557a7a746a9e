// Structured output in the engine, on SmolLM2 with the real grammar engine: outputs follow
// their grammar (checked by independent parsers: nlohmann's JSON and std::regex), end where
// the grammar ends, and stay so under n > 1, batching, preemption and speculative decoding,
// with greedy tokens batch-invariant and seeded ones equal across those paths.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "engine/grammar_vocabulary.h"
#include "grammar/compiler.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

using grammar::GrammarSpec;

std::shared_ptr<const grammar::VocabularyIndex> Vocab() {
  static const auto vocab =
      grammar::VocabularyIndex::Build(GrammarVocabulary(*SmolLm2().tokenizer));
  return vocab;
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(GrammarSpec spec) {
  auto compiled = grammar::CompileGrammar(spec, Vocab(), grammar::GrammarLimits{});
  TM_CHECK(compiled.ok()) << compiled.status().ToString();
  return *compiled;
}

std::vector<TokenId> Encode(const std::string& text) {
  StatusOr<std::vector<TokenId>> ids = SmolLm2().tokenizer->Encode(text);
  TM_CHECK(ids.ok()) << ids.status().ToString();
  return *ids;
}

const char kPersonSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})";

// What ran, per request id.
struct Outcome {
  std::map<RequestId, Collected> requests;
  EngineStats stats;
};

struct Job {
  std::string prompt;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: unconstrained
  float temperature = 0.0f;
  uint64_t seed = 0;
  int n = 1;
  int max_tokens = 96;
  bool logprobs = false;
};

Outcome RunJobs(const EngineConfig& config, const std::vector<Job>& jobs, bool batched = true,
            const Model* draft = nullptr) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, config, draft);
  TM_CHECK(core.ok()) << core.status().ToString();
  // By sequence: request id + index.
  std::map<RequestId, Collected> collected;
  const OutputSink sink = [&collected](GenerateOutput&& out) {
    Accumulate(collected[out.id + static_cast<RequestId>(out.index)], std::move(out));
  };
  std::vector<RequestId> ids;
  RequestId next = 1;
  for (const Job& job : jobs) {
    GenerateRequest request =
        Greedy(Encode(job.prompt), job.max_tokens, nullptr, /*ignore_eos=*/false);
    request.sampling.temperature = job.temperature;
    request.sampling.seed = job.seed;
    request.sampling.logprobs = job.logprobs;
    request.sampling.top_logprobs = job.logprobs ? 5 : 0;
    request.n = job.n;
    request.grammar = job.grammar;
    for (int i = 0; i < job.n; ++i) ids.push_back(next + static_cast<RequestId>(i));
    request.sink = sink;
    TM_CHECK((*core)->Add(next, std::move(request)).ok());
    next += static_cast<RequestId>(job.n);
    if (!batched) TM_CHECK(RunToCompletion(**core));
  }
  if (batched) TM_CHECK(RunToCompletion(**core));
  Outcome run;
  for (const RequestId id : ids) {
    TM_CHECK(collected[id].finished) << id;
    run.requests[id] = collected[id];
  }
  run.stats = (*core)->Stats();
  EXPECT_EQ((*core)->kv_cache().Stats().num_in_use_blocks, 0) << "blocks leaked";
  return run;
}

bool FinishedByGrammar(const Collected& c) {
  return c.final_event.finish_reason == CompletionReason::kStop;
}

void ExpectPerson(const Collected& c) {
  if (!FinishedByGrammar(c)) return;  // max_tokens cut it: a prefix
  const nlohmann::json value = nlohmann::json::parse(c.text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(value.is_discarded()) << c.text;
  ASSERT_TRUE(value.is_object()) << c.text;
  EXPECT_EQ(value.size(), 3u) << c.text;
  ASSERT_TRUE(value.contains("name") && value["name"].is_string()) << c.text;
  EXPECT_LE(value["name"].get<std::string>().size(), 20u * 4) << c.text;
  ASSERT_TRUE(value.contains("age") && value["age"].is_number_integer()) << c.text;
  EXPECT_GE(value["age"].get<int64_t>(), 0);
  EXPECT_LE(value["age"].get<int64_t>(), 120);
  ASSERT_TRUE(value.contains("tags") && value["tags"].is_array()) << c.text;
  EXPECT_LE(value["tags"].size(), 3u);
}

const char kPersonPrompt[] = "Describe a person as JSON with name, age and tags.\nJSON: ";

TEST(EngineGrammarTest, SampledJsonFollowsTheSchemaAndEnds) {
  const auto schema = Compile({.kind = GrammarSpec::Kind::kJsonSchema, .text = kPersonSchema,
                               .choices = {}});
  std::vector<Job> jobs;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    jobs.push_back({.prompt = kPersonPrompt, .grammar = schema, .temperature = 1.0f,
                    .seed = seed, .n = 1, .max_tokens = 160, .logprobs = false});
  }
  const Outcome run = RunJobs(SmallConfig(512), jobs);
  int completed = 0;
  for (const auto& [id, c] : run.requests) {
    ExpectPerson(c);
    completed += FinishedByGrammar(c);
  }
  EXPECT_GE(completed, 5) << "the grammar rarely let the model finish";
}

TEST(EngineGrammarTest, RegexChoiceAndGbnf) {
  const std::string regex = "[A-Z][a-z]{2,8}-[0-9]{2,4}";
  const std::vector<std::string> choices = {"positive", "negative", "neutral"};
  const std::vector<Job> jobs = {
      {.prompt = "A product code: ", .grammar = Compile({.kind = GrammarSpec::Kind::kRegex,
                                                         .text = regex, .choices = {}}),
       .temperature = 1.0f, .seed = 3, .n = 4, .max_tokens = 32, .logprobs = false},
      {.prompt = "Review: I loved it!\nSentiment: ",
       .grammar = Compile({.kind = GrammarSpec::Kind::kChoice, .text = {}, .choices = choices}),
       .temperature = 1.0f, .seed = 5, .n = 3, .max_tokens = 16, .logprobs = false},
      {.prompt = "Count: ",
       .grammar = Compile({.kind = GrammarSpec::Kind::kGbnf,
                           .text = "root ::= num (\", \" num){2}\nnum ::= [1-9] [0-9]?",
                           .choices = {}}),
       .temperature = 0.0f, .seed = 0, .n = 1, .max_tokens = 32, .logprobs = false},
  };
  const Outcome run = RunJobs(SmallConfig(512), jobs);
  for (RequestId id = 1; id <= 4; ++id) {
    const Collected& c = run.requests.at(id);
    ASSERT_TRUE(FinishedByGrammar(c)) << c.text;
    EXPECT_TRUE(std::regex_match(c.text, std::regex(regex))) << c.text;
  }
  for (RequestId id = 5; id <= 7; ++id) {
    const Collected& c = run.requests.at(id);
    ASSERT_TRUE(FinishedByGrammar(c)) << c.text;
    EXPECT_NE(std::find(choices.begin(), choices.end(), c.text), choices.end()) << c.text;
  }
  const Collected& gbnf = run.requests.at(8);
  ASSERT_TRUE(FinishedByGrammar(gbnf)) << gbnf.text;
  EXPECT_TRUE(std::regex_match(gbnf.text, std::regex("[1-9][0-9]?(, [1-9][0-9]?){2}")))
      << gbnf.text;
}

TEST(EngineGrammarTest, MaxTokensCutsWithLength) {
  const auto schema = Compile({.kind = GrammarSpec::Kind::kJsonSchema, .text = kPersonSchema,
                               .choices = {}});
  const Outcome run = RunJobs(SmallConfig(), {{.prompt = kPersonPrompt, .grammar = schema,
                                           .temperature = 0.0f, .seed = 0, .n = 1,
                                           .max_tokens = 4, .logprobs = false}});
  const Collected& c = run.requests.at(1);
  EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
  EXPECT_EQ(c.token_ids.size(), 4u);
  EXPECT_EQ(c.text.substr(0, 1), "{") << c.text;
}

TEST(EngineGrammarTest, LogprobsAreOfTheMaskedDistribution) {
  const std::vector<std::string> choices = {"yes", "no"};
  const Outcome run = RunJobs(
      SmallConfig(), {{.prompt = "Is the sky blue? Answer: ",
                       .grammar = Compile({.kind = GrammarSpec::Kind::kChoice, .text = {},
                                           .choices = choices}),
                       .temperature = 0.0f, .seed = 0, .n = 1, .max_tokens = 8,
                       .logprobs = true}});
  const Collected& c = run.requests.at(1);
  ASSERT_FALSE(c.logprobs.empty());
  // The first token is one of the few that start "yes" or "no": every other id is -inf, so
  // the top 5 hold at most those and their probabilities sum to (about) 1.
  double mass = 0;
  for (const TokenLogprob& top : c.logprobs[0].top) {
    if (!std::isfinite(top.logprob)) continue;
    const std::string piece(SmolLm2().tokenizer->Piece(top.token_id));
    EXPECT_TRUE(std::string("yes").starts_with(piece) || std::string("no").starts_with(piece))
        << "'" << piece << "'";
    mass += std::exp(static_cast<double>(top.logprob));
  }
  EXPECT_NEAR(mass, 1.0, 1e-3);
}

TEST(EngineGrammarTest, GreedyIsBatchInvariantAndSurvivesPreemption) {
  const auto schema = Compile({.kind = GrammarSpec::Kind::kJsonSchema, .text = kPersonSchema,
                               .choices = {}});
  const auto json_object = Compile({.kind = GrammarSpec::Kind::kJsonObject, .text = {},
                                    .choices = {}});
  const auto letters = Compile({.kind = GrammarSpec::Kind::kGbnf,
                                .text = "root ::= [a-z]{120}", .choices = {}});
  const std::vector<Job> jobs = {
      {.prompt = kPersonPrompt, .grammar = schema, .temperature = 0.0f, .seed = 0, .n = 1,
       .max_tokens = 96, .logprobs = false},
      {.prompt = "Once upon a time", .grammar = nullptr, .temperature = 0.0f, .seed = 0, .n = 1,
       .max_tokens = 96, .logprobs = false},
      {.prompt = "A JSON object about cats: ", .grammar = json_object, .temperature = 1.0f,
       .seed = 11, .n = 2, .max_tokens = 96, .logprobs = false},
      // Exactly 120 letters: long sequences that outgrow the tight pool below.
      {.prompt = "Letters: ", .grammar = letters, .temperature = 1.0f, .seed = 12, .n = 3,
       .max_tokens = 128, .logprobs = false},
  };
  const Outcome alone = RunJobs(SmallConfig(512), jobs, /*batched=*/false);
  const Outcome batched = RunJobs(SmallConfig(512), jobs, /*batched=*/true);
  // 12 blocks of 16 tokens for seven sequences, three of them ~125 tokens: some are
  // preempted.
  EngineConfig tight = SmallConfig(12);
  const Outcome preempted = RunJobs(tight, jobs, /*batched=*/true);
  EXPECT_GT(preempted.stats.num_preemptions, 0);
  for (const auto& [id, c] : alone.requests) {
    EXPECT_EQ(batched.requests.at(id).token_ids, c.token_ids) << "request " << id;
    EXPECT_EQ(preempted.requests.at(id).token_ids, c.token_ids) << "request " << id;
  }
  ExpectPerson(alone.requests.at(1));
  for (const RequestId id : {RequestId{3}, RequestId{4}}) {
    const Collected& c = alone.requests.at(id);
    if (!FinishedByGrammar(c)) continue;
    const auto value = nlohmann::json::parse(c.text, nullptr, false);
    EXPECT_TRUE(value.is_object()) << c.text;
  }
  for (const RequestId id : {RequestId{5}, RequestId{6}, RequestId{7}}) {
    const Collected& c = preempted.requests.at(id);
    EXPECT_TRUE(FinishedByGrammar(c)) << c.text;
    EXPECT_TRUE(std::regex_match(c.text, std::regex("[a-z]{120}"))) << c.text;
  }
}

EngineConfig Spec(SpecMethod method) {
  EngineConfig config = SmallConfig(512);
  config.spec.method = method;
  config.spec.num_speculative_tokens = 4;
  return config;
}

TEST(EngineGrammarTest, SpeculativeDecodingKeepsTheTokens) {
  const auto schema = Compile({.kind = GrammarSpec::Kind::kJsonSchema, .text = kPersonSchema,
                               .choices = {}});
  std::vector<Job> jobs;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    jobs.push_back({.prompt = kPersonPrompt, .grammar = schema,
                    .temperature = seed == 0 ? 0.0f : 1.0f, .seed = seed, .n = 1,
                    .max_tokens = 96, .logprobs = false});
  }
  const Outcome plain = RunJobs(SmallConfig(512), jobs);
  // n-gram drafts are deterministic: seeded requests draw the very tokens of plain decoding.
  const Outcome ngram = RunJobs(Spec(SpecMethod::kNgram), jobs);
  EXPECT_GT(ngram.stats.spec_num_draft_tokens, 0);
  // The target as its own (greedy) draft model: drafts that leave the grammar are refused.
  const Outcome self = RunJobs(Spec(SpecMethod::kDraft), {jobs[0]}, true, SmolLm2().model.get());
  for (const auto& [id, c] : plain.requests) {
    EXPECT_EQ(ngram.requests.at(id).token_ids, c.token_ids) << "request " << id;
    ExpectPerson(c);
  }
  EXPECT_EQ(self.requests.at(1).token_ids, plain.requests.at(1).token_ids);
}

// A greedy sequence of "Once upon a time" (its grammar starting after `starts_after`), next
// to a long unconstrained one that competes for the KV blocks; returns the first.
Collected RunWithTrigger(const EngineConfig& config,
                         std::shared_ptr<const grammar::CompiledGrammar> grammar,
                         std::vector<TokenId> starts_after, int* num_preemptions = nullptr,
                         std::vector<TokenId> reasoning_opens = {},
                         const Model* draft = nullptr) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, config, draft);
  TM_CHECK(core.ok()) << core.status().ToString();
  std::map<RequestId, Collected> collected;
  const OutputSink sink = [&collected](GenerateOutput&& out) {
    Accumulate(collected[out.id], std::move(out));
  };
  GenerateRequest request = Greedy(Encode("Once upon a time"), 96, sink, /*ignore_eos=*/false);
  request.grammar = std::move(grammar);
  request.grammar_starts_after = std::move(starts_after);
  request.grammar_reasoning_opens = std::move(reasoning_opens);
  TM_CHECK((*core)->Add(1, std::move(request)).ok());
  TM_CHECK((*core)->Add(2, Greedy(Encode("Letters: "), 120, sink, /*ignore_eos=*/true)).ok());
  TM_CHECK(RunToCompletion(**core));
  EXPECT_EQ((*core)->kv_cache().Stats().num_in_use_blocks, 0) << "blocks leaked";
  if (num_preemptions != nullptr) *num_preemptions = (*core)->Stats().num_preemptions;
  return collected[1];
}

TEST(EngineGrammarTest, ConstraintStartsAfterItsTrigger) {
  // The reasoning hook: free decoding up to the trigger (as a reasoning model's </think>),
  // the grammar from the next token on.
  const Collected free = RunWithTrigger(SmallConfig(512), nullptr, {});
  ASSERT_GE(free.token_ids.size(), 12u);
  const std::vector<TokenId> trigger(free.token_ids.begin() + 6, free.token_ids.begin() + 8);
  size_t end = 2;  // where the trigger first ends in the free output
  while (!std::equal(trigger.begin(), trigger.end(), free.token_ids.begin() + end - 2)) ++end;
  const auto letters = Compile({.kind = GrammarSpec::Kind::kGbnf,
                                .text = "root ::= [a-z]{100}", .choices = {}});
  std::vector<TokenId> plain;
  // 7 blocks of 16 tokens for ~130 and ~50 tokens: the constrained sequence is preempted
  // (its matcher rebuilt from the tokens after the trigger) or its neighbour is.
  for (const int blocks : {512, 7}) {
    int preemptions = 0;
    const Collected c = RunWithTrigger(SmallConfig(blocks), letters, trigger, &preemptions);
    if (blocks == 7) {
      EXPECT_GT(preemptions, 0);
    }
    ASSERT_GT(c.token_ids.size(), end) << blocks;
    EXPECT_TRUE(std::equal(c.token_ids.begin(), c.token_ids.begin() + static_cast<long>(end),
                           free.token_ids.begin()))
        << "free until the trigger, blocks " << blocks;
    const std::string constrained = SmolLm2().tokenizer->Decode(
        std::span<const TokenId>(c.token_ids).subspan(end));
    EXPECT_TRUE(std::regex_match(constrained, std::regex("[a-z]{100}"))) << constrained;
    EXPECT_TRUE(FinishedByGrammar(c)) << blocks;
    if (blocks == 512) plain = c.token_ids;
  }
  // The target as its own draft model: the step that completes the trigger drafts the free
  // text after it, which the rows past the trigger refuse, so the tokens are plain decoding's.
  const Collected drafted = RunWithTrigger(Spec(SpecMethod::kDraft), letters, trigger, nullptr,
                                           {}, SmolLm2().model.get());
  EXPECT_EQ(drafted.token_ids, plain);
  EXPECT_TRUE(FinishedByGrammar(drafted));
}

TEST(EngineGrammarTest, ConstraintStartsWhereAModelOpenedReasoningEnds) {
  // A model that may open its reasoning itself: as the free output's first two tokens
  // (greedy takes them, since its rows allow them beside the grammar), its reasoning is free
  // up to the trigger; with an opening it never writes, the grammar holds from the first token.
  const Collected free = RunWithTrigger(SmallConfig(512), nullptr, {});
  ASSERT_GE(free.token_ids.size(), 12u);
  const std::vector<TokenId> opens(free.token_ids.begin(), free.token_ids.begin() + 2);
  const std::vector<TokenId> trigger(free.token_ids.begin() + 6, free.token_ids.begin() + 8);
  size_t end = 2;
  while (!std::equal(trigger.begin(), trigger.end(), free.token_ids.begin() + end - 2)) ++end;
  const auto letters = Compile({.kind = GrammarSpec::Kind::kGbnf,
                                .text = "root ::= [a-z]{100}", .choices = {}});
  for (const int blocks : {512, 7}) {
    int preemptions = 0;
    const Collected c =
        RunWithTrigger(SmallConfig(blocks), letters, trigger, &preemptions, opens);
    if (blocks == 7) {
      EXPECT_GT(preemptions, 0);
    }
    ASSERT_GT(c.token_ids.size(), end) << blocks;
    EXPECT_TRUE(std::equal(c.token_ids.begin(), c.token_ids.begin() + static_cast<long>(end),
                           free.token_ids.begin()))
        << "free until the trigger, blocks " << blocks;
    const std::string constrained = SmolLm2().tokenizer->Decode(
        std::span<const TokenId>(c.token_ids).subspan(end));
    EXPECT_TRUE(std::regex_match(constrained, std::regex("[a-z]{100}"))) << constrained;
    EXPECT_TRUE(FinishedByGrammar(c)) << blocks;
  }
  // (The model's rows would take "<think>" here: a CJK character it does not.)
  const std::vector<TokenId> never = Encode("漢字");
  ASSERT_FALSE(never.empty());
  const Collected direct = RunWithTrigger(SmallConfig(512), letters, trigger, nullptr, never);
  const std::string text = SmolLm2().tokenizer->Decode(direct.token_ids);
  EXPECT_TRUE(std::regex_match(text, std::regex("[a-z]{100}"))) << text;
  EXPECT_TRUE(FinishedByGrammar(direct));
}

// The engine's output side ends a parsed turn after its one tool call, as it ends a stop
// string: finish reason kToolCalls, nothing generated after the call, and its KV blocks freed
// by the normal finish (no abort). The grammar forces the call and goes on after it, so only
// the turn's end stops the sequence early.
TEST(EngineGrammarTest, AParsedTurnEndsAfterItsOneToolCall) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, SmallConfig(), nullptr);
  ASSERT_TRUE(core.ok());
  // The call is complete once its arguments are (what follows adds nothing to it).
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}";
  const std::string after = "}\n</tool_call> and then a long text that nobody wants to read";
  const auto grammar = Compile({.kind = GrammarSpec::Kind::kGbnf,
                                .text = R"(root ::= "<tool_call>\n{\"name\": \"get_weather\", )"
                                        R"(\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>)"
                                        R"( and then a long text that nobody wants to read")",
                                .choices = {}});
  Collector collector;
  GenerateRequest request = Greedy(Encode("Weather in Paris?"), 96, collector.Sink(1));
  request.grammar = grammar;
  request.output_parsing = OutputParserOptions{
      .tool_calls = ToolCallFormat::kHermes, .parallel = false, .seed = 1};
  ASSERT_TRUE((*core)->Add(1, std::move(request)).ok());
  ASSERT_TRUE(RunToCompletion(**core));
  const Collected& c = collector[1];
  EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kToolCalls);
  EXPECT_EQ(c.text, "") << "the call is no content";
  const std::string generated = SmolLm2().tokenizer->Decode(
      c.token_ids, DecodeOptions{.render_special = false, .strip_space_prefix = false});
  EXPECT_TRUE(generated.starts_with(call)) << generated;
  EXPECT_LT(generated.size(), (call + after).size()) << "it ran on after the call";
  EXPECT_EQ(c.final_event.usage.completion_tokens, static_cast<int>(c.token_ids.size()));
  EXPECT_EQ((*core)->Stats().num_finished, 1);
  EXPECT_TRUE((*core)->CheckIdle().ok());
}

TEST(EngineGrammarTest, MinTokensWithAGrammarIsRefused) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, SmallConfig(), nullptr);
  ASSERT_TRUE(core.ok());
  Collector collector;
  GenerateRequest request = Greedy(Encode("x"), 8, collector.Sink(1));
  request.sampling.min_tokens = 2;
  request.grammar = Compile({.kind = GrammarSpec::Kind::kChoice, .text = {}, .choices = {"a"}});
  const Status status = (*core)->Add(1, std::move(request));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("min_tokens"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace tokenmill::testing
