#include "minimllm/metrics/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "minimllm/config/input_error.hpp"

namespace minimllm {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

bool check_replaceable(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;  // absent (or unreadable: creating it will say why)
  if (S_ISREG(st.st_mode)) return true;
  throw InputError(fmt::format(
      "{}: is {}; minimllm creates or replaces only regular files and never follows a link there: remove it "
      "or choose another {}",
      path, kind_of(st.st_mode), flag.empty() ? std::string("output path") : flag));
}

int create_temporary(const std::string& path, const std::string& infix, const std::string& suffix,
                     std::string& temporary) {
  std::vector<char> name(path.begin(), path.end());
  const std::string tail = infix + "XXXXXX" + suffix;
  name.insert(name.end(), tail.begin(), tail.end());
  name.push_back('\0');
  const int fd = ::mkostemps(name.data(), static_cast<int>(suffix.size()), O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(
        fmt::format("{}: cannot create a temporary file beside it: {}", path, std::strerror(errno)));
  temporary = name.data();
  // mkstemp makes the file 0600; the file it becomes is read by others as any output is (0644 less umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0644 & ~mask);
  return fd;
}

int remove_stale_temporaries(const std::string& path, const std::string& infix, const std::string& suffix) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(path).parent_path();
  const std::string prefix = fs::path(path).filename().string() + infix;
  if (dir.empty()) dir = ".";
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const bool plain = middle.size() <= 40 && std::all_of(middle.begin(), middle.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '.';
                       });
    struct stat st {};
    if (plain && ::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        ::unlink(it->path().c_str()) == 0)
      ++removed;
  }
  return removed;
}

void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const void* bytes, std::size_t size,
                           const std::string& what, const std::string& flag, bool overwrite) {
  check_replaceable(path, flag);
  std::string temporary;
  int fd = create_temporary(path, ".tmp.", "", temporary);
  const auto fail = [&](const char* step) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(temporary.c_str());
    throw std::runtime_error(
        fmt::format("{}: cannot write the {} ({} {}: {}); the previous file, if any, is kept", path, what,
                    step, temporary, reason));
  };
  const char* data = static_cast<const char*>(bytes);
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      fail("writing");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail("syncing");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("closing");
  // A name planted since the first check is refused, not replaced: rename would replace a link itself
  // (never write through it), but the run must not take over a name it did not make.
  try {
    check_replaceable(path, flag);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  if (overwrite) {
    if (::rename(temporary.c_str(), path.c_str()) != 0) fail("renaming");
  } else if (::link(temporary.c_str(), path.c_str()) == 0) {  // fails when path exists: one writer wins
    ::unlink(temporary.c_str());
  } else if (errno == EEXIST) {
    ::unlink(temporary.c_str());
    throw InputError(
        fmt::format("{}: {} exists; pass --overwrite to replace it or choose another {}", path, what, flag));
  } else {
    fail("linking");
  }
  sync_directory_of(path);
}

}  // namespace minimllm
