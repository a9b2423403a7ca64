#include "backend/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/file_io.h"
#include "core/safetensors.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLatest = "latest";

/// fsync a file or directory so a rename after it cannot expose stale data.
void syncPath(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string stepDirName(int64_t steps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(steps));
  return buf;
}

}  // namespace

Status writeCheckpoint(const std::string& dir, const Checkpoint& ckpt) {
  auto r = catchErrors([&]() -> bool {
    if (!ckpt.trainer.contains("steps_done")) fail("checkpoint: trainer state lacks steps_done");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("checkpoint: cannot create " + dir + ": " + ec.message());
    std::string name = stepDirName(ckpt.trainer["steps_done"].get<int64_t>());
    fs::path final_dir = fs::path(dir) / name;
    fs::path tmp = fs::path(dir) / (name + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(tmp, ec);
    fs::create_directory(tmp, ec);
    if (ec) fail("checkpoint: cannot create " + tmp.string() + ": " + ec.message());
    auto cleanup = [&] { fs::remove_all(tmp, ec); };
    auto check = [&](Status s) {
      if (!s) {
        cleanup();
        fail("checkpoint: " + s.error().message);
      }
    };
    check(writeSafetensors((tmp / "model.safetensors").string(), ckpt.model));
    check(writeSafetensors((tmp / "optimizer.safetensors").string(), ckpt.optimizer));
    check(writeFileAtomic((tmp / "trainer.json").string(), ckpt.trainer.dump(2) + "\n"));
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer.json"}) syncPath(tmp / f);
    syncPath(tmp);
    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir, ec);
    if (ec) {
      cleanup();
      fail("checkpoint: cannot move " + tmp.string() + " to " + final_dir.string() + ": " + ec.message());
    }
    syncPath(dir);
    check(writeFileAtomic((fs::path(dir) / kLatest).string(), name + "\n"));
    syncPath(dir);
    // Only now is the new checkpoint the one a resume finds: drop older ones.
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 && e.path().filename() != name)
        fs::remove_all(e.path(), ec);
    return true;
  });
  if (!r) return r.error();
  return {};
}

Result<Checkpoint> readCheckpoint(const std::string& dir) {
  return catchErrors([&]() -> Checkpoint {
    fs::path latest = fs::path(dir) / kLatest;
    auto name = readFile(latest.string());
    if (!name) fail("resume: " + dir + " is not a Kiln checkpoint directory (" + name.error().message + ")");
    std::string n = *name;
    while (!n.empty() && (n.back() == '\n' || n.back() == '\r' || n.back() == ' ')) n.pop_back();
    if (n.empty() || n.find('/') != std::string::npos || n.find("..") != std::string::npos)
      fail("resume: " + latest.string() + " does not name a checkpoint");
    fs::path step_dir = fs::path(dir) / n;
    Checkpoint c;
    auto model = readSafetensors((step_dir / "model.safetensors").string());
    if (!model) fail("resume: " + model.error().message);
    auto opt = readSafetensors((step_dir / "optimizer.safetensors").string());
    if (!opt) fail("resume: " + opt.error().message);
    auto meta = readFile((step_dir / "trainer.json").string());
    if (!meta) fail("resume: " + meta.error().message);
    c.trainer = nlohmann::json::parse(*meta, nullptr, false);
    if (c.trainer.is_discarded() || !c.trainer.is_object() || !c.trainer.contains("steps_done") ||
        !c.trainer["steps_done"].is_number_integer())
      fail("resume: " + (step_dir / "trainer.json").string() + " is not valid trainer state");
    c.model = std::move(model->tensors);
    c.optimizer = std::move(opt->tensors);
    return c;
  });
}

}  // namespace kiln
