// A `tokenmill` subcommand: each registers its options on the app and runs when chosen.
// Results go to stdout; errors go to stderr with a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "common/status.h"

namespace tokenmill::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // the process exit code
};

// Prints "error: <message>" to stderr and returns the exit code 1.
int Fail(const Status& status);

// The KV cache's block size in tokens for the commands that run the model: the engine's default.
inline constexpr int kBlockSize = 16;

Command AddInfoCommand(CLI::App& app);
Command AddDequantizeCommand(CLI::App& app);
Command AddGenerateCommand(CLI::App& app);
Command AddTokenizeCommand(CLI::App& app);
Command AddRenderChatCommand(CLI::App& app);
Command AddPerplexityCommand(CLI::App& app);

}  // namespace tokenmill::cli
