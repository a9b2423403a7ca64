#include "tests/torch/zoo_exports.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kiln::test {

namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(KILN_SOURCE_DIR) / "models";
const fs::path kDir = fs::path(KILN_WORK_DIR) / "zoo_exports";

/// What an export depends on besides the model's name.
std::vector<fs::path> exporterSources() {
  return {kModels / "export.py", kModels / "zoo.py", kModels / "fx_dump.py", kModels / "st_io.py"};
}

/// A directory and the formats exported into it.
struct ExportJob {
  std::vector<std::string> formats;
  fs::path dir;
};

/// One Python process that runs every job.
std::string exportCommand(const std::string& name, const std::vector<ExportJob>& jobs) {
  std::string py = "import sys; sys.path.insert(0, '" + kModels.string() + "'); import export; ";
  for (const ExportJob& j : jobs) {
    std::string list;
    for (const std::string& f : j.formats) list += "'" + f + "',";
    py += "export.export('" + name + "', [" + list + "], '" + j.dir.string() + "', log=sys.stdout); ";
  }
  return std::string(KILN_PYTHON) + " -c \"" + py + "\" 2>&1";
}

}  // namespace

int runShell(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = pclose(p);
  if (out) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool freshFile(const fs::path& file, const std::vector<fs::path>& sources) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return false;
  const auto t = fs::last_write_time(file, ec);
  for (const fs::path& s : sources)
    if (fs::exists(s, ec) && fs::last_write_time(s, ec) > t) return false;
  return true;
}

FileLock::FileLock(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  fd_ = open(path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd_ >= 0) flock(fd_, LOCK_EX);
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    flock(fd_, LOCK_UN);
    close(fd_);
  }
}

bool ZooEntry::has(const std::string& format) const {
  return std::find(formats.begin(), formats.end(), format) != formats.end();
}

const std::optional<std::vector<ZooEntry>>& zooEntries() {
  static const std::optional<std::vector<ZooEntry>> entries = []() -> std::optional<std::vector<ZooEntry>> {
    const fs::path cache = kDir / "models.txt";
    std::string text;
    {
      FileLock lock(cache.string() + ".lock");
      if (!freshFile(cache, exporterSources())) {
        const std::string cmd =
            std::string(KILN_PYTHON) + " " + (kModels / "export.py").string() + " --list 2>/dev/null";
        if (runShell(cmd, &text) != 0) return std::nullopt;
        std::ofstream(cache) << text;
      } else {
        std::ifstream in(cache);
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
    }
    std::vector<ZooEntry> out;
    std::istringstream lines(text);
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string name, mode, formats;
      if (!(words >> name >> mode >> formats)) continue;
      ZooEntry e{name, mode == "train", {}};
      std::stringstream fs(formats);
      for (std::string f; std::getline(fs, f, ',');) e.formats.push_back(f);
      out.push_back(std::move(e));
    }
    if (out.empty()) return std::nullopt;
    return out;
  }();
  return entries;
}

ZooExport zooExport(const std::string& name, const std::string& format) {
  const auto& entries = zooEntries();
  const ZooEntry* entry = nullptr;
  if (entries)
    for (const ZooEntry& e : *entries)
      if (e.name == name) entry = &e;
  ZooExport r;
  if (!entry || !entry->has(format)) {
    r.log = "export.py --list does not list " + name + " with format " + format;
    return r;
  }
  // trace and fx into main/ (they share the inputs and expected outputs), script into script/ (it writes NAME.pt
  // too).
  std::vector<ExportJob> jobs = {{{}, kDir / "main"}};
  for (const char* f : {"trace", "fx"})
    if (entry->has(f)) jobs[0].formats.push_back(f);
  if (jobs[0].formats.empty()) jobs.clear();
  if (entry->has("script")) jobs.push_back({{"script"}, kDir / "script"});
  std::vector<fs::path> outputs;
  for (const ExportJob& j : jobs) {
    const std::string prefix = (j.dir / name).string();
    outputs.insert(outputs.end(), {prefix + ".input.safetensors", prefix + ".expected.safetensors"});
    for (const std::string& f : j.formats) outputs.push_back(prefix + (f == "fx" ? ".fx.json" : ".pt"));
  }
  r.prefix = (kDir / (format == "script" ? "script" : "main") / name).string();
  FileLock lock((kDir / (name + ".lock")).string());
  const auto sources = exporterSources();
  if (std::all_of(outputs.begin(), outputs.end(), [&](const fs::path& p) { return freshFile(p, sources); })) {
    r.ok = true;
    return r;
  }
  r.ok = runShell(exportCommand(name, jobs), &r.log) == 0;
  return r;
}

}  // namespace kiln::test
