#include "common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace cputrain {
namespace {

std::string DirOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: some file systems refuse fsync on directories
    ::close(fd);
  }
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  tmp_path_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) {
    throw InputError(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)),
                     fmt::format("check that directory '{}' exists and is writable", DirOf(path_)));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void AtomicFileWriter::Write(const void* data, std::size_t bytes) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    throw RuntimeError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(errno)),
                       "check free disk space; the previous version of the file is untouched");
  }
}

void AtomicFileWriter::Commit() {
  CPUTRAIN_CHECK(!committed_, "Commit called twice");
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  int err = errno;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    throw RuntimeError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)),
                       "check free disk space; the previous version of the file is untouched");
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    throw RuntimeError(
        fmt::format("renaming '{}' to '{}' failed: {}", tmp_path_, path_, std::strerror(errno)));
  }
  committed_ = true;
  FsyncDir(DirOf(path_));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)),
                     "check the path");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileAtomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.Write(contents);
  w.Commit();
}

void SyncDir(const std::string& dir) { FsyncDir(dir); }

void MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw InputError(fmt::format("cannot create directory '{}': {}", dir,
                                 ec ? ec.message() : "a file with that name exists"),
                     "choose another output directory or fix its permissions");
  }
}

}  // namespace cputrain
