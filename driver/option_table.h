// The option table: every field of CompileOptions a user can set, declared
// once with its flag, its help text, the commands that take it, and what it
// does to the compiled step. From it come the command-line flags of every
// command (and of kiln-studio), the compile cache key (an option that
// changes the compiled step is in the key by declaration, so it cannot be
// forgotten there), and the report's `options` object.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "driver/compile_options.h"

namespace CLI {
class App;
}

namespace kiln::driver {

/// The front ends that take options from the table (a bit set).
enum Command : uint32_t {
  kTrain = 1u << 0,
  kGrad = 1u << 1,
  kCompile = 1u << 2,
  kBench = 1u << 3,
  kMemory = 1u << 4,
  kExport = 1u << 5,
  kOpt = 1u << 6,     ///< kiln opt: the options the passes read
  kStudio = 1u << 7,  ///< kiln-studio: what kiln compile takes
  kComm = 1u << 8,    ///< kiln comm: what kiln train takes
};

/// What an option does to the compiled step.
enum class KeyRule {
  Compiled,      ///< changes the step graph, its kernels or its memory plan: in the cache key
  FileContents,  ///< names a file whose bytes change the step: the file's fingerprint is in the key
  /// the model file: its structure fingerprint is in the key (core/file_fingerprint.h:
  /// a TorchScript archive's weights' values are not), the imported graph checks a hit
  ModelStructure,
  DataParallel,  ///< in the key when the step has several ranks (it holds their collectives)
  Implied,       ///< not its value but what it implies is in the key (a batch file's tensor types)
  Runtime,       ///< changes only how the step runs or what is printed: not in the key
};

/// A pointer to the field an option sets.
using OptionField = std::variant<std::string*, std::vector<std::string>*, int*, int64_t*, uint64_t*, double*, bool*,
                                 std::optional<double>*>;

struct OptionSpec {
  const char* flags;  ///< CLI11 names: "--lr", "--verbose,-v", or "model" (positional)
  const char* help;
  uint32_t commands;  ///< Command bits
  KeyRule key;
  OptionField (*field)(CompileOptions&);
  /// The allowed values, comma-separated ("cpu,cuda"); nullptr: any.
  const char* choices = nullptr;

  /// The long name without dashes, '-' as '_': the option's name in the
  /// cache key and the report ("--label-smoothing" -> "label_smoothing").
  std::string jsonName() const;
};

/// Every option, in the order --help lists them.
const std::vector<OptionSpec>& optionTable();

/// Register the options of `command` on `sub`, bound to `o`.
void addOptions(CLI::App* sub, CompileOptions& o, Command command);

/// Every option's value by jsonName(): the report's `options` object.
nlohmann::ordered_json optionsJson(const CompileOptions& o);

/// The options of a report's `options` object back into `o` (keys it does
/// not know are skipped: a newer report may have more); a value of the
/// wrong type is an error naming the key.
Status optionsFromJson(const nlohmann::json& j, CompileOptions& o);

/// The command-line words that give `command` the options of `o` that
/// differ from their defaults (the model path excluded): how kiln-studio
/// hands its options to the kiln train it starts.
std::vector<std::string> toArguments(const CompileOptions& o, Command command);

/// The options that change a step compiled for `ranks` ranks, by
/// jsonName(), for the compile cache key: Compiled ones, DataParallel ones
/// when ranks > 1, FileContents ones as the fingerprint of their file and
/// ModelStructure ones as their file's structure fingerprint (an error when
/// it cannot be read).
Result<nlohmann::ordered_json> compiledOptionsJson(const CompileOptions& o, int ranks);

}  // namespace kiln::driver
