// The zoo exports the torch tests read, made once per change of the zoo.
//
// TorchScriptImportZoo (trace, script) and FxParity (fx) check the same
// models' eval-mode forwards through the two importers. The first test of a
// model exports it, in one Python process, in every format it supports:
// trace and fx together (with the inputs and PyTorch's outputs they share)
// into KILN_WORK_DIR/zoo_exports/main/, script (which also writes NAME.pt)
// into zoo_exports/script/. ctest runs each test in its own process,
// possibly several at once: the export is made under a file lock and kept
// while newer than the exporter's sources, so every other test of the model
// and every later run reads it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kiln::test {

/// Run a shell command; returns its exit status and (optionally) its stdout.
int runShell(const std::string& cmd, std::string* out = nullptr);

/// True when `file` exists and is newer than every path in `sources`.
bool freshFile(const std::filesystem::path& file, const std::vector<std::filesystem::path>& sources);

/// Holds an exclusive lock on `path` while alive.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

/// One row of `export.py --list`.
struct ZooEntry {
  std::string name;
  bool train = false;                ///< exported in train mode
  std::vector<std::string> formats;  ///< of trace, script, fx
  bool has(const std::string& format) const;
};

/// Every zoo model, from `export.py --list` (cached in the work dir while
/// newer than the zoo's sources); nullopt when the exporter failed.
const std::optional<std::vector<ZooEntry>>& zooEntries();

struct ZooExport {
  bool ok = false;
  std::string prefix;  ///< DIR/NAME: NAME.pt / NAME.fx.json, NAME.input/expected.safetensors
  std::string log;     ///< export.py's output, when it failed
};

/// `name` exported so that `format` (trace, script or fx) can be read.
ZooExport zooExport(const std::string& name, const std::string& format);

}  // namespace kiln::test
