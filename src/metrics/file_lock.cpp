#include "minimllm/metrics/file_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "minimllm/config/input_error.hpp"
#include "minimllm/metrics/output_file.hpp"

namespace minimllm {
namespace {

// The pid a lock file holds (written by its holder), or "unknown".
std::string lock_holder(int fd) {
  char text[32] = {0};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  const std::string pid = n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
  const auto end = pid.find_first_not_of("0123456789");
  return pid.substr(0, end).empty() ? "unknown" : pid.substr(0, end);
}

std::string busy_message(const std::string& path, int fd) {
  return fmt::format("{} is being written by another running minimllm (pid {})", path, lock_holder(fd));
}

}  // namespace

std::string create_failure_reason(const std::string& path, const std::string& fallback) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fmt::format("directory {} does not exist", dir.string());
  if (::access(dir.c_str(), W_OK) != 0) return fmt::format("directory {} is not writable", dir.string());
  struct statvfs fs_stat {};
  if (::statvfs(dir.c_str(), &fs_stat) == 0 && fs_stat.f_bavail == 0) return "no space left on the device";
  return fallback;
}

std::string FileLock::lock_path(const std::string& path) { return path + ".lock"; }

FileLock::FileLock(const std::string& path, const std::string& what) : path_(lock_path(path)) {
  for (;;) {
    // Never through a planted link (O_NOFOLLOW), never blocked by a FIFO (O_NONBLOCK); only a regular file
    // holds the lock.
    check_replaceable(path_, "");
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == ELOOP) check_replaceable(path_, "");  // a link planted since: named
    struct stat opened {};
    if (fd_ >= 0 && (::fstat(fd_, &opened) != 0 || !S_ISREG(opened.st_mode))) {
      ::close(fd_);
      fd_ = -1;
      check_replaceable(path_, "");
      throw InputError(fmt::format("{}: not a regular file; remove it", path_));
    }
    if (fd_ < 0)
      throw std::runtime_error(
          fmt::format("{}: cannot create {}: {}", path, what,
                      create_failure_reason(path, "its lock file could not be created")));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) break;  // a file system without flock (e.g. NFS mounted nolock): unlocked
      const std::string message = busy_message(path, fd_);
      ::close(fd_);
      fd_ = -1;
      throw InputError(message);
    }
    // The holder before us may have removed the file between our open and our lock: then we hold a lock
    // on a file no one else can see, so start again with the file now at the path.
    struct stat held {};
    struct stat named {};
    if (::fstat(fd_, &held) == 0 && ::lstat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      held_ = true;
      break;
    }
    ::close(fd_);
    fd_ = -1;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; the message of a refused run says "pid unknown".
  }
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held, so no one locks the file being removed
  ::close(fd_);
}

void FileLock::check_not_busy(const std::string& path) {
  check_replaceable(lock_path(path), "");
  const int fd = ::open(lock_path(path).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;  // no lock file: no writer (a link planted since is refused by the writer's lock)
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  const std::string message = busy ? busy_message(path, fd) : std::string();
  ::close(fd);  // releases a lock taken here
  if (busy) throw InputError(message);
}

}  // namespace minimllm
