// tokenmill: command-line tools over a model file.
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  using namespace tokenmill::cli;
  CLI::App app{"tokenmill: tools over GGUF model files"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");

  const std::vector<Command> commands = {
      AddInfoCommand(app),
      AddDequantizeCommand(app),
      AddGenerateCommand(app),
      AddTokenizeCommand(app),
      AddRenderChatCommand(app),
      AddPerplexityCommand(app),
  };
  CLI11_PARSE(app, argc, argv);
  if (const tokenmill::Status s = tokenmill::SetupLogging(log_level); !s.ok()) return Fail(s);
  for (const Command& command : commands) {
    if (*command.app) return command.run();
  }
  return 2;
}
