// `tokenmill tokenize --model PATH TEXT`: the token ids of TEXT as a JSON array, with the BOS
// (and EOS) the model adds. --file reads the text from a file instead.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill::cli {
namespace {

struct TokenizeOptions {
  std::string model_path;
  std::string text;
  std::string text_file;
  bool parse_special = false;
  bool no_special = false;
};

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read '" + path + "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

int RunTokenize(const TokenizeOptions& options) {
  std::string text = options.text;
  if (!options.text_file.empty()) {
    StatusOr<std::string> read = ReadFile(options.text_file);
    if (!read.ok()) return Fail(read.status());
    text = std::move(read).value();
  }
  StatusOr<GgufFile> file = GgufFile::Open(options.model_path);
  if (!file.ok()) return Fail(file.status());
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf(*file);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  StatusOr<std::vector<TokenId>> ids = tokenizer->Encode(
      text, {.add_special = !options.no_special, .parse_special = options.parse_special});
  if (!ids.ok()) return Fail(ids.status());
  std::cout << nlohmann::json(*ids).dump() << "\n";
  return 0;
}

}  // namespace

Command AddTokenizeCommand(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  sub->add_option("--model", options->model_path, "GGUF file")->required();
  CLI::Option* text = sub->add_option("text", options->text, "the text to tokenize");
  CLI::Option* file = sub->add_option("--file", options->text_file, "read the text from a file");
  text->excludes(file);
  sub->add_flag("--parse-special", options->parse_special,
                "turn special-token text such as <|im_start|> into those tokens");
  sub->add_flag("--no-special", options->no_special, "add no BOS/EOS");
  sub->callback([text, file] {
    if (text->count() == 0 && file->count() == 0) {
      throw CLI::RequiredError("TEXT or --file");
    }
  });
  return {sub, [options] { return RunTokenize(*options); }};
}

}  // namespace tokenmill::cli
