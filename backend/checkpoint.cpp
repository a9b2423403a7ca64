#include "backend/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/fault_injection.h"
#include "core/file_io.h"
#include "core/safetensors.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLatest = "latest";

/// fsync a file or directory, so a rename after it cannot expose stale
/// data. EINVAL (a file system that cannot sync this object) is not an
/// error; any other failure is: a checkpoint that may not be on disk must
/// not be called saved.
Status syncPath(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"cannot open " + p.string() + " to sync it: " + std::strerror(errno)};
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return Error{"cannot sync " + p.string() + ": " + std::strerror(err)};
  return {};
}

std::string stepDirName(int64_t steps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(steps));
  return buf;
}

/// A complete checkpoint's directory name: "step-00000100", or
/// "step-00000100-r2" for the same step saved again. Returns its order
/// (step, revision); nullopt for anything else, such as another writer's
/// "step-00000100.tmp-1234" still being written.
std::optional<std::pair<int64_t, int64_t>> checkpointOrder(const std::string& name) {
  const std::string_view n(name);
  auto digitsAt = [&](size_t from) {
    size_t to = from;
    while (to < n.size() && n[to] >= '0' && n[to] <= '9') ++to;
    return to - from;
  };
  if (n.substr(0, 5) != "step-") return std::nullopt;
  const size_t step_digits = digitsAt(5);
  if (step_digits < 8 || step_digits > 18) return std::nullopt;
  const int64_t step = std::stoll(name.substr(5, step_digits));
  const size_t rest = 5 + step_digits;
  if (rest == n.size()) return std::pair{step, int64_t{0}};
  if (n.substr(rest, 2) != "-r") return std::nullopt;
  const size_t rev_digits = digitsAt(rest + 2);
  if (rev_digits == 0 || rev_digits > 9 || n[rest + 2] == '0' || rest + 2 + rev_digits != n.size()) return std::nullopt;
  return std::pair{step, std::stoll(name.substr(rest + 2))};
}

}  // namespace

Status writeCheckpoint(const std::string& dir, const Checkpoint& ckpt, int keep) {
  auto r = catchErrors([&]() -> bool {
    if (!ckpt.trainer.contains("steps_done")) fail("checkpoint: trainer state lacks steps_done");
    if (keep < 1) fail("checkpoint: keep at least 1 checkpoint");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("checkpoint: cannot create " + dir + ": " + ec.message());
    // A name no directory has yet: the same step saved again gets a
    // revision, so the checkpoint `latest` names is never removed or
    // replaced before `latest` names the new one.
    const std::string base = stepDirName(ckpt.trainer["steps_done"].get<int64_t>());
    std::string name = base;
    for (int rev = 1; fs::exists(fs::path(dir) / name, ec); ++rev) name = base + "-r" + std::to_string(rev);
    const fs::path final_dir = fs::path(dir) / name;
    const fs::path tmp = fs::path(dir) / (name + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(tmp, ec);  // this process's own leftover, if any
    fs::create_directory(tmp, ec);
    if (ec) fail("checkpoint: cannot create " + tmp.string() + ": " + ec.message());
    auto check = [&](Status s) {
      if (!s) {
        fs::remove_all(tmp, ec);
        fail("checkpoint: " + s.error().message);
      }
    };
    check(writeSafetensors((tmp / "model.safetensors").string(), ckpt.model));
    check(writeSafetensors((tmp / "optimizer.safetensors").string(), ckpt.optimizer));
    check(writeFileAtomic((tmp / "trainer.json").string(), ckpt.trainer.dump(2) + "\n"));
    fault::sleepMillis(fault::millis("KILN_FAULT_CHECKPOINT_PAUSE_MS"));  // tests: a slow disk, a kill mid-write
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer.json"}) check(syncPath(tmp / f));
    check(syncPath(tmp));
    fs::rename(tmp, final_dir, ec);
    if (ec) check(Error{"cannot move " + tmp.string() + " to " + final_dir.string() + ": " + ec.message()});
    if (Status st = syncPath(dir); !st) fail("checkpoint: " + st.error().message);
    if (Status st = writeFileAtomic((fs::path(dir) / kLatest).string(), name + "\n"); !st)
      fail("checkpoint: " + st.error().message);
    if (Status st = syncPath(dir); !st) fail("checkpoint: " + st.error().message);
    // Only now is the new checkpoint the one a resume finds: drop the older
    // complete ones beyond `keep` (never another writer's temporaries).
    std::vector<std::pair<std::pair<int64_t, int64_t>, fs::path>> complete;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (auto order = checkpointOrder(e.path().filename().string()); order && e.is_directory())
        complete.emplace_back(*order, e.path());
    std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    size_t kept = 0;
    for (const auto& [order, path] : complete) {
      if (path.filename() == name || kept + 1 < static_cast<size_t>(keep)) {
        if (path.filename() != name) ++kept;
        continue;
      }
      fs::remove_all(path, ec);
    }
    return true;
  });
  if (!r) return r.error();
  return {};
}

Result<std::string> latestCheckpoint(const std::string& dir) {
  const fs::path latest = fs::path(dir) / kLatest;
  auto name = readFile(latest.string());
  if (!name) return Error{"resume: " + dir + " is not a Kiln checkpoint directory (" + name.error().message + ")"};
  std::string n = *name;
  while (!n.empty() && (n.back() == '\n' || n.back() == '\r' || n.back() == ' ')) n.pop_back();
  if (n.empty() || n.find('/') != std::string::npos || n.find("..") != std::string::npos)
    return Error{"resume: " + latest.string() + " does not name a checkpoint"};
  return n;
}

Result<int64_t> checkpointStepsDone(const std::string& dir) {
  auto n = latestCheckpoint(dir);
  if (!n) return n.error();
  const std::string path = (fs::path(dir) / *n / "trainer.json").string();
  auto text = readFile(path);
  if (!text) return Error{"resume: " + text.error().message};
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("steps_done") || !j["steps_done"].is_number_integer())
    return Error{"resume: " + path + " is not valid trainer state"};
  return j["steps_done"].get<int64_t>();
}

Result<CheckpointFiles> readCheckpointFiles(const std::string& dir) {
  return catchErrors([&]() -> CheckpointFiles {
    auto n = latestCheckpoint(dir);
    if (!n) fail(n.error().message);
    const fs::path step_dir = fs::path(dir) / *n;
    CheckpointFiles f;
    f.step_dir = step_dir.string();
    for (auto [file, out] : {std::pair{"model.safetensors", &f.model}, std::pair{"optimizer.safetensors", &f.optimizer},
                             std::pair{"trainer.json", &f.trainer}}) {
      auto bytes = readFile((step_dir / file).string());
      if (!bytes) fail("resume: " + bytes.error().message);
      *out = std::move(*bytes);
    }
    return f;
  });
}

Result<Checkpoint> parseCheckpoint(const CheckpointFiles& f) {
  return catchErrors([&]() -> Checkpoint {
    const fs::path step_dir(f.step_dir);
    auto bytesOf = [](const std::string& s) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    };
    auto model = parseSafetensors(bytesOf(f.model), (step_dir / "model.safetensors").string());
    if (!model) fail("resume: " + model.error().message);
    auto opt = parseSafetensors(bytesOf(f.optimizer), (step_dir / "optimizer.safetensors").string());
    if (!opt) fail("resume: " + opt.error().message);
    Checkpoint c;
    c.trainer = nlohmann::json::parse(f.trainer, nullptr, false);
    if (c.trainer.is_discarded() || !c.trainer.is_object() || !c.trainer.contains("steps_done") ||
        !c.trainer["steps_done"].is_number_integer())
      fail("resume: " + (step_dir / "trainer.json").string() + " is not valid trainer state");
    c.model = std::move(model->tensors);
    c.optimizer = std::move(opt->tensors);
    return c;
  });
}

Result<Checkpoint> readCheckpoint(const std::string& dir) {
  auto files = readCheckpointFiles(dir);
  if (!files) return files.error();
  return parseCheckpoint(*files);
}

}  // namespace kiln
