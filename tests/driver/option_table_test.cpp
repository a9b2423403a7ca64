// The option table (driver/option_table.h) against what is generated from
// it: every option's flag parses into its field on every command that takes
// it, every option is in the report's `options` object, and an option that
// changes the compiled step changes the compile cache key (and one that
// does not, does not).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "driver/option_table.h"
#include "driver/step_cache.h"

namespace kiln::driver {
namespace {

namespace fs = std::filesystem;

constexpr Command kCommands[] = {kTrain, kGrad, kCompile, kBench, kMemory, kExport, kOpt, kStudio, kComm};

/// A value other than the default for any field.
void perturb(const OptionField& f) {
  std::visit(
      [](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>)
          *p += "x";
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          p->push_back("x");
        else if constexpr (std::is_same_v<T, bool>)
          *p = !*p;
        else if constexpr (std::is_same_v<T, std::optional<double>>)
          *p = p->value_or(0) + 0.25;
        else
          *p += 3;
      },
      f);
}

/// The command-line words that set the option to a value other than its default.
std::vector<std::string> words(const OptionSpec& spec, const OptionField& f) {
  std::string flag = spec.flags;
  flag = flag.substr(0, flag.find(','));
  std::string value = std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>)
          return "";
        else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>>)
          return "some-value";
        else
          return "3";
      },
      f);
  if (spec.choices) value = std::string(spec.choices).substr(std::string(spec.choices).rfind(',') + 1);
  std::vector<std::string> w;
  if (flag.rfind("-", 0) == 0) w.push_back(flag);
  if (!value.empty()) w.push_back(value);
  return w;
}

std::string fileWith(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("kiln_option_table_test_" + std::to_string(::getpid()) + name);
  std::ofstream(p) << text;
  return p;
}

TEST(OptionTable, NamesAreUniqueAndEveryOptionHasACommand) {
  std::set<std::string> names;
  for (const OptionSpec& spec : optionTable()) {
    EXPECT_TRUE(names.insert(spec.jsonName()).second) << spec.flags;
    EXPECT_NE(spec.commands, 0u) << spec.flags;
    EXPECT_FALSE(std::string(spec.help).empty()) << spec.flags;
  }
  EXPECT_EQ(optionTable().front().jsonName(), "model");
  CompileOptions o;
  const nlohmann::ordered_json j = optionsJson(o);
  EXPECT_EQ(j.size(), optionTable().size());
  for (const OptionSpec& spec : optionTable()) EXPECT_TRUE(j.contains(spec.jsonName())) << spec.flags;
  EXPECT_TRUE(j.at("weight_decay").is_null());
  EXPECT_EQ(j.at("label_smoothing"), 0.0);
  EXPECT_EQ(j.at("optimizer"), "adamw");
}

TEST(OptionTable, EveryFlagSetsItsFieldOnEveryCommandThatTakesIt) {
  for (Command command : kCommands) {
    size_t taken = 0;
    for (const OptionSpec& spec : optionTable()) {
      if (!(spec.commands & command)) continue;
      ++taken;
      CompileOptions o;
      CLI::App app("test");
      addOptions(&app, o, command);
      std::vector<std::string> argv = words(spec, spec.field(o));
      if (spec.jsonName() != "model" && app.get_option_no_throw("model"))
        argv.insert(argv.begin(), "model.pt");  // the required positional
      std::vector<std::string> reversed(argv.rbegin(), argv.rend());            // CLI11 parses a reversed vector
      const nlohmann::ordered_json before = optionsJson(CompileOptions{});
      ASSERT_NO_THROW(app.parse(reversed)) << spec.flags << " on command " << command;
      EXPECT_NE(optionsJson(o).at(spec.jsonName()), before.at(spec.jsonName()))
          << spec.flags << " on command " << command << " did not set its field";
    }
    EXPECT_GT(taken, 0u) << "command " << command << " takes no option";
  }
  // A command does not take what the table does not give it.
  CompileOptions o;
  CLI::App grad("grad");
  addOptions(&grad, o, kGrad);
  EXPECT_THROW(grad.parse(std::vector<std::string>{"0.1", "--lr", "model.pt"}), CLI::ParseError);
  CLI::App opt("opt");
  addOptions(&opt, o, kOpt);
  EXPECT_EQ(opt.get_option_no_throw("--device"), nullptr);
  EXPECT_NE(opt.get_option_no_throw("--optimizer"), nullptr);
}

/// Options with every field changed (as `perturb` does), the model named.
CompileOptions allChanged() {
  CompileOptions o;
  for (const OptionSpec& spec : optionTable()) perturb(spec.field(o));
  o.model.path = "model.pt";
  o.device = "cuda";  // a choice (--device takes cpu or cuda)
  o.metric = "perplexity";  // a choice too
  o.weight_decay = 0.1 / 3;  // a double that needs all 17 digits
  o.lr = 1e-3 / 7;
  return o;
}

TEST(OptionTable, TheReportsOptionsReadBack) {
  const CompileOptions o = allChanged();
  CompileOptions back;
  ASSERT_TRUE(optionsFromJson(nlohmann::json(optionsJson(o)), back).ok());
  EXPECT_EQ(optionsJson(back), optionsJson(o));
  // Keys it does not know are skipped; a wrong type names the key.
  CompileOptions other;
  EXPECT_TRUE(optionsFromJson(nlohmann::json{{"an_option_of_the_future", 1}, {"lr", 0.5}}, other).ok());
  EXPECT_EQ(other.lr, 0.5);
  for (const nlohmann::json& bad : {nlohmann::json{{"lr", "fast"}}, nlohmann::json{{"steps", true}},
                                    nlohmann::json{{"freeze", "layer1"}}, nlohmann::json{{"amp", 16}}}) {
    Status st = optionsFromJson(bad, other);
    ASSERT_FALSE(st.ok()) << bad.dump();
    EXPECT_EQ(st.error().message.rfind("options." + bad.begin().key() + ": ", 0), 0u) << st.error().message;
  }
  EXPECT_FALSE(optionsFromJson(nlohmann::json::array(), other).ok());
}

TEST(OptionTable, ArgumentsFromOptionsParseBackToThem) {
  for (Command command : kCommands) {
    const CompileOptions o = allChanged();
    std::vector<std::string> argv = toArguments(o, command);
    CompileOptions back;
    CLI::App app("test");
    addOptions(&app, back, command);
    if (app.get_option_no_throw("model")) argv.insert(argv.begin(), o.model.path);
    try {
      app.parse(std::vector<std::string>(argv.rbegin(), argv.rend()));
    } catch (const CLI::ParseError& e) {
      FAIL() << "command " << command << ": " << e.what();
    }
    const nlohmann::ordered_json got = optionsJson(back), want = optionsJson(o);
    for (const OptionSpec& spec : optionTable()) {
      const std::string n = spec.jsonName();
      if (spec.commands & command)
        EXPECT_EQ(got.at(n), want.at(n)) << n << " on command " << command;
      else
        EXPECT_EQ(got.at(n), optionsJson(CompileOptions{}).at(n)) << n << " on command " << command;
    }
  }
  EXPECT_TRUE(toArguments(CompileOptions{}, kTrain).empty());
}

TEST(OptionTable, AnOptionThatChangesTheStepChangesTheCacheKey) {
  const std::string model = fileWith("model.fx.json", "{\"a model\": 1}");
  const std::string other = fileWith("other.fx.json", "{\"another model\": 2}");
  const std::string weights = fileWith("weights.txt", "1 2 3");
  auto material = [&](const CompileOptions& o) {
    auto m = stepCacheKeyMaterial(o, TrainingGraphKind::Step, {});
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return m.ok() ? *m : std::string();
  };
  for (int ranks : {1, 2}) {
    CompileOptions base;
    base.model.path = model;
    base.compile_only = true;  // kiln compile --nproc N: the key of one rank's step
    base.nproc = ranks;
    const std::string reference = material(base);
    for (const OptionSpec& spec : optionTable()) {
      // The rank count itself, and what --input-file and --data imply: checked below.
      if (spec.jsonName() == "nproc" || spec.key == KeyRule::Implied) continue;
      CompileOptions o = base;
      const OptionField f = spec.field(o);
      if (spec.key == KeyRule::FileContents || spec.key == KeyRule::ModelStructure)
        *std::get<std::string*>(f) = spec.jsonName() == "model" ? other : weights;
      else
        perturb(f);
      const bool in_key = spec.key == KeyRule::Compiled || spec.key == KeyRule::FileContents ||
                          spec.key == KeyRule::ModelStructure ||
                          (spec.key == KeyRule::DataParallel && ranks > 1);
      if (in_key)
        EXPECT_NE(material(o), reference) << spec.flags << " changes the step but not the key (ranks " << ranks << ")";
      else
        EXPECT_EQ(material(o), reference) << spec.flags << " is declared " << (ranks > 1 ? "runtime" : "per-rank")
                                          << " but changes the key";
    }
  }
  CompileOptions one, two;
  one.model.path = two.model.path = model;
  one.compile_only = two.compile_only = true;
  two.nproc = 2;
  EXPECT_NE(material(one), material(two));
  // --data: a token file and a directory of batches make different steps.
  CompileOptions tokens = one, directory = one;
  tokens.data = weights;
  directory.data = fs::temp_directory_path();
  EXPECT_NE(material(tokens), material(one));
  EXPECT_EQ(material(directory), material(one));
  // --input-file: its tensors' types are the batch types (TensorMap first_batch).
  TensorMap batch;
  batch.emplace("input0", Tensor(DType::F32, {2, 3}));
  auto with_batch = stepCacheKeyMaterial(one, TrainingGraphKind::Step, batch);
  ASSERT_TRUE(with_batch.ok());
  EXPECT_NE(*with_batch, material(one));
  // The same file's bytes changed: a new key.
  CompileOptions o;
  o.model.path = model;
  const std::string before = material(o);
  std::ofstream(model) << "{\"a model\": 3}";
  EXPECT_NE(material(o), before);
  for (const std::string& p : {model, other, weights}) fs::remove(p);
}

}  // namespace
}  // namespace kiln::driver
