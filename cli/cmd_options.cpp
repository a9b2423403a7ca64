// kiln options [--json]: the option table (driver/option_table.h): every
// option of the commands that compile a model, which commands take it, and
// whether it changes the compiled step (and so the compile cache key).
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "driver/option_table.h"

namespace kiln::cli {
namespace {

const char* keyRuleName(KeyRule k) {
  switch (k) {
    case KeyRule::Compiled: return "compiled";
    case KeyRule::FileContents: return "file-contents";
    case KeyRule::ModelStructure: return "model-structure";
    case KeyRule::DataParallel: return "data-parallel";
    case KeyRule::Implied: return "implied";
    case KeyRule::Runtime: return "runtime";
  }
  return "?";
}

std::string commandNames(uint32_t bits) {
  static const std::pair<Command, const char*> kNames[] = {
      {kTrain, "train"}, {kComm, "comm"},     {kGrad, "grad"}, {kCompile, "compile"}, {kBench, "bench"},
      {kMemory, "memory"}, {kExport, "export"}, {kOpt, "opt"}, {kStudio, "kiln-studio"}};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (bits & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

void listOptions(bool json) {
  if (json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const OptionSpec& s : optionTable())
      all.push_back({{"name", s.jsonName()},
                     {"flags", s.flags},
                     {"key", keyRuleName(s.key)},
                     {"commands", commandNames(s.commands)},
                     {"help", s.help}});
    std::cout << all.dump(2) << "\n";
    return;
  }
  std::cout << "cache key: compiled = in the key; file-contents = the file's fingerprint is; model-structure = the "
               "model file's fingerprint without its weights' values is; data-parallel = in the key with several ranks; "
               "implied = what it implies is (a batch's types); runtime = not\n\n";
  std::cout << std::left << std::setw(26) << "option" << std::setw(17) << "cache key" << "commands\n";
  for (const OptionSpec& s : optionTable())
    std::cout << std::left << std::setw(26) << s.flags << std::setw(17) << keyRuleName(s.key)
              << commandNames(s.commands) << "\n";
}

}  // namespace

void addOptionsCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "options", "list the options of the commands that compile a model: which commands take each, and "
                 "whether it is part of the compile cache key");
  sub->add_flag("--json", *json, "as a JSON array (name, flags, key, commands, help)");
  sub->callback([json] { listOptions(*json); });
}

}  // namespace kiln::cli
