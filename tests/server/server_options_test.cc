#include "server/grpc/server_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/forward_backend.h"

namespace tokenmill::server {
namespace {

using ::testing::HasSubstr;

// Parses argv into fresh options, as tokenmill-server does.
struct Parsed {
  explicit Parsed(std::vector<std::string> args) {
    AddServerOptions(app, options);
    args.insert(args.begin(), "tokenmill-server");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      error = e.what();
    }
  }
  CLI::App app;
  ServerOptions options;
  std::string error;
};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ServerOptions, EnvNameIsTheFlagInUpperSnakeCase) {
  EXPECT_EQ(EnvNameOfFlag("--max-num-batched-tokens"), "TOKENMILL_MAX_NUM_BATCHED_TOKENS");
  EXPECT_EQ(EnvNameOfFlag("--model"), "TOKENMILL_MODEL");
}

TEST(ServerOptions, EveryFlagOfTheIssueHasItsVariable) {
  CLI::App app;
  ServerOptions options;
  AddServerOptions(app, options);
  for (const char* flag :
       {"--model", "--host", "--port", "--metrics-port", "--metrics-compat", "--threads",
        "--device", "--kv-cache-memory", "--block-size", "--max-num-seqs",
        "--max-num-batched-tokens", "--max-queue", "--no-prefix-cache", "--no-sliding-window-kv",
        "--log-level", "--log-json", "--drain-timeout",
        "--spec", "--spec-tokens", "--draft-model"}) {
    SCOPED_TRACE(flag);
    const CLI::Option* option = app.get_option(flag);
    ASSERT_NE(option, nullptr);
    EXPECT_EQ(option->get_envname(), EnvNameOfFlag(flag));
  }
}

TEST(ServerOptions, EnvironmentSetsAndCommandLineWins) {
  ScopedEnv queue("TOKENMILL_MAX_QUEUE", "7");
  ScopedEnv port("TOKENMILL_PORT", "1234");
  ScopedEnv no_prefix("TOKENMILL_NO_PREFIX_CACHE", "1");
  Parsed parsed({"--model", "m.gguf", "--port", "4321"});
  ASSERT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.options.max_queue, 7);
  EXPECT_EQ(parsed.options.port, 4321);
  EXPECT_TRUE(parsed.options.no_prefix_cache);
}

TEST(ServerOptions, BadValuesFailAtParseTime) {
  EXPECT_THAT(Parsed({"--model", "m", "--port", "70000"}).error, HasSubstr("--port"));
  EXPECT_THAT(Parsed({"--model", "m", "--device", "tpu"}).error, HasSubstr("--device"));
  EXPECT_THAT(Parsed({"--model", "m", "--max-queue", "0"}).error, HasSubstr("--max-queue"));
  EXPECT_THAT(Parsed({"--model", "m", "--log-level", "loud"}).error, HasSubstr("--log-level"));
  EXPECT_THAT(Parsed({"--model", "m", "--kv-cache-dtype", "int3"}).error,
              HasSubstr("--kv-cache-dtype"));
  // Every parser the server has is a value the flag takes (mistral_v11 was refused).
  for (const char* parser :
       {"hermes", "llama3_json", "mistral", "mistral_v11", "json", "harmony", "deepseek_v3",
        "deepseek_v31", "kimi_k2"}) {
    EXPECT_EQ(Parsed({"--model", "m", "--tool-call-parser", parser}).error, "") << parser;
  }
  ScopedEnv env("TOKENMILL_BLOCK_SIZE", "zero");
  EXPECT_THAT(Parsed({"--model", "m"}).error, HasSubstr("--block-size"));
}

// The names of the default model, as ModelSourcesOf gives them.
std::vector<std::string> DefaultModelNames(const ServerOptions& options) {
  const StatusOr<std::vector<ModelSource>> sources = ModelSourcesOf(options);
  EXPECT_TRUE(sources.ok()) << sources.status().message();
  return sources.ok() ? sources->front().names : std::vector<std::string>{};
}

TEST(ServedModelNames, DefaultIsTheFileNameWithoutGguf) {
  const Parsed parsed({"--model", "models/SmolLM2-135M-Instruct.Q4_1.gguf"});
  ASSERT_EQ(parsed.error, "");
  EXPECT_THAT(DefaultModelNames(parsed.options),
              ::testing::ElementsAre("SmolLM2-135M-Instruct.Q4_1"));
}

TEST(ServedModelNames, FlagTakesSeveralNamesAndTheVariableACommaList) {
  const Parsed flag({"--model", "m.gguf", "--served-model-name", "smol", "org/tiny"});
  EXPECT_THAT(DefaultModelNames(flag.options), ::testing::ElementsAre("smol", "org/tiny"));
  const ScopedEnv env("TOKENMILL_SERVED_MODEL_NAME", "a,b");
  const Parsed variable({"--model", "m.gguf"});
  EXPECT_THAT(DefaultModelNames(variable.options), ::testing::ElementsAre("a", "b"));
}

TEST(ModelSources, NamedModelsAndADirectoryInOrderTheFirstTheDefault) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "model-sources-dir";
  std::filesystem::create_directories(dir / "nested.gguf");  // a directory: not a model
  for (const char* file : {"b.gguf", "a.gguf", "notes.txt"}) std::ofstream(dir / file) << "x";
  const Parsed parsed({"--model", "chat=models/x=1/m.gguf", "--model", "dir/plain.gguf",
                       "--models-dir", dir.string()});
  ASSERT_EQ(parsed.error, "");
  const StatusOr<std::vector<ModelSource>> sources = ModelSourcesOf(parsed.options);
  ASSERT_TRUE(sources.ok()) << sources.status().message();
  ASSERT_EQ(sources->size(), 4u);
  EXPECT_EQ((*sources)[0].path, "models/x=1/m.gguf");  // NAME= only before any '/'
  EXPECT_THAT((*sources)[0].names, ::testing::ElementsAre("chat"));
  EXPECT_EQ((*sources)[1].path, "dir/plain.gguf");
  EXPECT_THAT((*sources)[1].names, ::testing::ElementsAre("plain"));
  EXPECT_THAT((*sources)[2].names, ::testing::ElementsAre("a"));
  EXPECT_EQ((*sources)[2].path, (dir / "a.gguf").string());
  EXPECT_THAT((*sources)[3].names, ::testing::ElementsAre("b"));
  // A path with '=' and no name stays a path.
  const Parsed unnamed({"--model", "./x=1.gguf"});
  EXPECT_EQ(ModelSourcesOf(unnamed.options)->front().path, "./x=1.gguf");
}

TEST(ModelSources, RefusesNoModelTwiceANameAndAMissingDirectory) {
  EXPECT_THAT(ModelSourcesOf(Parsed({}).options).status().message(), HasSubstr("--model PATH"));
  EXPECT_THAT(ModelSourcesOf(Parsed({"--model", "a=x.gguf", "--model", "a=y.gguf"}).options)
                  .status()
                  .message(),
              HasSubstr("two models are called 'a'"));
  EXPECT_THAT(ModelSourcesOf(Parsed({"--model", "x.gguf", "--model", "other/x.gguf"}).options)
                  .status()
                  .message(),
              HasSubstr("NAME=PATH"));
  EXPECT_THAT(ModelSourcesOf(Parsed({"--model", "a=x.gguf", "--model", "b=y.gguf", "--lora",
                                     "b=l.gguf"})
                                 .options)
                  .status()
                  .message(),
              HasSubstr("--lora b"));
  EXPECT_THAT(ModelSourcesOf(Parsed({"--models-dir", "/no/such/dir"}).options).status().message(),
              HasSubstr("--models-dir /no/such/dir"));
  EXPECT_THAT(ModelSourcesOf(Parsed({"--model", "bad name=x.gguf"}).options).status().message(),
              HasSubstr("no spaces"));
}

TEST(ModelSources, TheDefaultModelsFlagsStayWithIt) {
  const Parsed parsed({"--model", "a=x.gguf", "--model", "b=y.gguf", "--lora", "l=l.gguf",
                       "--spec", "ngram", "--tool-call-parser", "hermes", "--pooling", "mean",
                       "--kv-cache-memory", "64MiB"});
  ASSERT_EQ(parsed.error, "");
  const std::vector<ModelSource> sources = *ModelSourcesOf(parsed.options);
  const ServerOptions first = OptionsForModel(parsed.options, sources[0], true);
  EXPECT_EQ(first.model_path, "x.gguf");
  EXPECT_THAT(first.lora_adapters, ::testing::ElementsAre("l=l.gguf"));
  EXPECT_EQ(first.spec, "ngram");
  const ServerOptions second = OptionsForModel(parsed.options, sources[1], false);
  EXPECT_EQ(second.model_path, "y.gguf");
  EXPECT_THAT(second.served_model_names, ::testing::ElementsAre("b"));
  EXPECT_TRUE(second.lora_adapters.empty());
  EXPECT_EQ(second.spec, "none");
  EXPECT_EQ(second.tool_call_parser, "auto");
  EXPECT_EQ(second.pooling, "auto");
  EXPECT_EQ(second.kv_cache_memory, "64MiB");  // each model its own pool of this size
}

TEST(ModelSources, TheModelsVariableIsNoModelsDir) {
  // The tests' and scripts' "where the model files are" must not become models to serve.
  const ScopedEnv env("TOKENMILL_MODELS_DIR", "/tmp");
  const Parsed parsed({"--model", "m.gguf"});
  EXPECT_EQ(parsed.options.models_dir, "");
}

TEST(ModelSources, MemoryIsASizeOrZero) {
  EXPECT_EQ(*ModelMemoryOf(Parsed({"--model", "m"}).options), 0);
  EXPECT_EQ(*ModelMemoryOf(Parsed({"--model", "m", "--model-memory", "2GiB"}).options),
            int64_t{2} << 30);
  EXPECT_THAT(ModelMemoryOf(Parsed({"--model", "m", "--model-memory", "lots"}).options)
                  .status()
                  .message(),
              HasSubstr("--model-memory"));
}

TEST(ServedModelNames, RefusesEmptySpacedAndRepeatedNames) {
  for (const std::vector<std::string>& names :
       std::vector<std::vector<std::string>>{{""}, {"a b"}, {"tab\there"}, {"x", "x"}}) {
    ServerOptions options;
    options.served_model_names = names;
    const StatusOr<std::vector<std::string>> refused = ServedModelNamesOf(options);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(refused.status().message(), HasSubstr("--served-model-name"));
  }
}

TEST(ServerOptions, GrammarCacheBudgetIsSizedToTheMachineOrTheFlag) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  const ServerOptions defaults = Parsed({"--model", "m"}).options;
  EXPECT_EQ(*GrammarCacheBudgetOf(defaults, 24 * kGiB), 24 * kGiB / 16);
  EXPECT_EQ(*GrammarCacheBudgetOf(defaults, 512 * kGiB), 4 * kGiB);  // capped
  // At least one grammar of --grammar-max-table-mib (256 MiB), however small the machine.
  EXPECT_EQ(*GrammarCacheBudgetOf(defaults, 2 * kGiB), int64_t{256} << 20);
  Parsed set({"--model", "m", "--grammar-cache-mib", "300"});
  ASSERT_EQ(set.error, "");
  EXPECT_EQ(*GrammarCacheBudgetOf(set.options, 24 * kGiB), int64_t{300} << 20);
  Parsed small({"--model", "m", "--grammar-cache-mib", "100"});
  const StatusOr<int64_t> refused = GrammarCacheBudgetOf(small.options, 24 * kGiB);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--grammar-max-table-mib 256"));
}

TEST(ServerOptions, GrammarCapsComeFromTheirFlags) {
  Parsed parsed({"--model", "m", "--grammar-max-repetition", "50", "--grammar-max-table-mib", "8",
                 "--grammar-max-compile-ms", "1500", "--grammar-max-schema-depth", "5"});
  ASSERT_EQ(parsed.error, "");
  const grammar::GrammarLimits limits = GrammarLimitsOf(parsed.options);
  EXPECT_EQ(limits.max_repetition, 50);
  EXPECT_EQ(limits.max_table_bytes, int64_t{8} << 20);
  EXPECT_EQ(limits.max_compile_time, std::chrono::milliseconds(1500));
  EXPECT_EQ(limits.max_schema_depth, 5);
  EXPECT_EQ(GrammarLimitsOf(Parsed({"--model", "m"}).options).max_repetition,
            grammar::GrammarLimits{}.max_repetition);
  // The refusal names what the request sent and the flag that would let it through.
  const grammar::GrammarSpec spec{grammar::GrammarSpec::Kind::kJsonSchema,
                                  R"({"type": "string", "maxLength": 60})", {}};
  const Status status = grammar::SpecToGbnf(spec, limits).status();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("at /maxLength: maxLength 60 is over the limit of 50"));
  EXPECT_THAT(status.message(), HasSubstr("--grammar-max-repetition"));
  EXPECT_THAT(Parsed({"--model", "m", "--grammar-max-repetition", "0"}).error,
              HasSubstr("--grammar-max-repetition"));
}

TEST(MakeEngineConfig, MapsFlagsToTheEngine) {
  ServerOptions options;
  options.kv_cache_memory = "64MiB";
  options.block_size = 32;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 512;
  options.max_prefills_per_step = 2;
  options.max_queue = 3;
  options.max_model_len = 1024;
  options.no_prefix_cache = true;
  options.no_sliding_window_kv = true;
  options.threads = 2;
  StatusOr<EngineConfig> config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kv_cache_bytes, int64_t{64} << 20);
  EXPECT_EQ(config->block_size, 32);
  EXPECT_EQ(config->scheduler.max_num_seqs, 8);
  EXPECT_EQ(config->scheduler.max_num_batched_tokens, 512);
  EXPECT_EQ(config->scheduler.max_prefills_per_step, 2);
  EXPECT_EQ(config->scheduler.max_queue, 3);
  EXPECT_EQ(config->scheduler.max_model_len, 1024);
  EXPECT_FALSE(config->enable_prefix_caching);
  EXPECT_FALSE(config->sliding_window_kv_group);
  EXPECT_EQ(config->num_threads, 2);
  EXPECT_EQ(config->kv_type, KvType::kF16);
  options.kv_cache_dtype = "int8";
  config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kv_type, KvType::kInt8);
  options.kv_cache_dtype = "q4_0";
  config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kv_type, KvType::kQ4_0);
  options.kv_cache_dtype = "int4";
  config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kv_type, KvType::kInt4);
}

TEST(MakeEngineConfig, FractionOfAvailableMemory) {
  ServerOptions options;
  options.kv_cache_memory = "0.25";
  StatusOr<EngineConfig> config = MakeEngineConfig(options, int64_t{4} << 30);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->kv_cache_bytes, int64_t{1} << 30);
}

// Unset, one prompt begins a step on the CPU (each of a burst answers after its own prompt);
// 0 asks for no limit.
TEST(MakeEngineConfig, OnePrefillAStepOnTheCpuUnlessAsked) {
  ServerOptions options;
  StatusOr<EngineConfig> config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->scheduler.max_prefills_per_step, 1);
  options.max_prefills_per_step = 0;
  config = MakeEngineConfig(options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->scheduler.max_prefills_per_step, 0);
}

TEST(MakeEngineConfig, RefusesWhatCannotWork) {
  ServerOptions options;
  options.kv_cache_memory = "lots";
  StatusOr<EngineConfig> bad_memory = MakeEngineConfig(options, 0);
  ASSERT_FALSE(bad_memory.ok());
  EXPECT_THAT(bad_memory.status().message(), HasSubstr("--kv-cache-memory"));

}

TEST(MakeEngineConfig, CudaWhereAGpuIsElseRefused) {
  ServerOptions options;
  options.device = "cuda";
  options.kv_cache_memory = "0.5";
  options.cublas_min_tokens = 64;
  StatusOr<EngineConfig> cuda = MakeEngineConfig(options, int64_t{4} << 30);
  if (!CheckDeviceAvailable(Device::kCuda).ok()) {
    ASSERT_FALSE(cuda.ok());
    EXPECT_THAT(cuda.status().message(), HasSubstr("use --device cpu"));
    return;
  }
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  EXPECT_EQ(cuda->device, Device::kCuda);
  EXPECT_EQ(cuda->kv_cache_fraction, 0.5);  // of the GPU's memory, not of the host's
  // A GPU step's time hardly grows with its tokens: prompts begin together.
  EXPECT_EQ(cuda->scheduler.max_prefills_per_step, 0);
  EXPECT_EQ(cuda->cuda_cublas_min_tokens, 64);
  options.kv_cache_dtype = "q4_0";  // the 4-bit types run on CUDA too
  const StatusOr<EngineConfig> q4 = MakeEngineConfig(options, int64_t{4} << 30);
  ASSERT_TRUE(q4.ok()) << q4.status().ToString();
  EXPECT_EQ(q4->kv_type, KvType::kQ4_0);
}

TEST(MakeEngineConfig, Fp8KvCacheNeedsCuda) {
  ServerOptions options;
  options.kv_cache_dtype = "fp8";
  StatusOr<EngineConfig> fp8 = MakeEngineConfig(options, 0);
  ASSERT_FALSE(fp8.ok());
  EXPECT_THAT(fp8.status().message(), HasSubstr("--kv-cache-dtype fp8 needs --device cuda"));
}

TEST(MakeEngineConfig, KvCacheDtypeVSetsVsTypeApartFromKs) {
  Parsed apart({"--model", "m", "--kv-cache-dtype", "int8", "--kv-cache-dtype-v", "q4_0"});
  ASSERT_EQ(apart.error, "");
  StatusOr<EngineConfig> config = MakeEngineConfig(apart.options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kv_type, KvType::kInt8);
  EXPECT_EQ(config->v_type(), KvType::kQ4_0);
  Parsed same({"--model", "m", "--kv-cache-dtype", "int8"});
  config = MakeEngineConfig(same.options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->v_type(), KvType::kInt8);
  EXPECT_THAT(Parsed({"--model", "m", "--kv-cache-dtype-v", "fp8"}).error,
              HasSubstr("--kv-cache-dtype-v"));
}

TEST(MakeEngineConfig, SpeculativeDecodingFlags) {
  Parsed ngram({"--model", "m", "--spec", "ngram", "--spec-tokens", "6"});
  ASSERT_EQ(ngram.error, "");
  StatusOr<EngineConfig> config = MakeEngineConfig(ngram.options, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->spec.method, SpecMethod::kNgram);
  EXPECT_EQ(config->spec.num_speculative_tokens, 6);

  EXPECT_EQ(MakeEngineConfig(Parsed({"--model", "m"}).options, 0)->spec.method,
            SpecMethod::kNone);
  EXPECT_THAT(Parsed({"--model", "m", "--spec", "eagle"}).error, HasSubstr("--spec"));
  EXPECT_THAT(Parsed({"--model", "m", "--spec-tokens", "0"}).error, HasSubstr("--spec-tokens"));
  EXPECT_THAT(Parsed({"--model", "m", "--draft-model", "/no/such.gguf"}).error,
              HasSubstr("--draft-model"));

  ServerOptions draft;
  draft.spec = "draft";
  StatusOr<EngineConfig> no_path = MakeEngineConfig(draft, 0);
  ASSERT_FALSE(no_path.ok());
  EXPECT_THAT(no_path.status().message(), HasSubstr("--draft-model PATH"));
  draft.spec = "ngram";
  draft.draft_model_path = "d.gguf";
  StatusOr<EngineConfig> unused = MakeEngineConfig(draft, 0);
  ASSERT_FALSE(unused.ok());
  EXPECT_THAT(unused.status().message(), HasSubstr("only used with --spec draft"));
}

}  // namespace
}  // namespace tokenmill::server
