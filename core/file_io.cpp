#include "core/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {

Result<std::string> readFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Error{path + ": " + std::strerror(errno)};
  if (S_ISDIR(st.st_mode)) return Error{path + ": is a directory, expected a file"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open: " + std::strerror(errno)};
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  if (st.st_size > 0 && !in.read(data.data(), st.st_size)) return Error{path + ": read failed"};
  return data;
}

Status writeFileAtomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Error{path + ": cannot write: " + std::strerror(errno)};
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    int e = errno;
    std::remove(tmp.c_str());
    return Error{path + ": write failed: " + std::strerror(e)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    return Error{path + ": cannot rename temporary file into place: " + std::strerror(e)};
  }
  return Status::Ok();
}

}  // namespace kiln
