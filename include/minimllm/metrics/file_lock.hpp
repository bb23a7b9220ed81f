// The exclusive lock a writer holds on its output while it runs (docs/HDF5.md, "Output safety"): a flock on
// `<path>.lock` holding the writer's pid, so that another minimllm, even with --overwrite, refuses to touch
// a file being written. A lock file left by a killed process holds no lock (the kernel drops it with the
// process) and never blocks.
#pragma once

#include <string>

namespace minimllm {

class FileLock {
 public:
  // Takes the lock on `<path>.lock` (non-blocking). Throws InputError "<path> is being written by another
  // running minimllm (pid N)" when a running writer holds it; std::runtime_error "<path>: cannot create
  // <what>: <reason>" when the lock file cannot be created. On a file system without flock (e.g. NFS
  // mounted nolock) the writer runs unlocked.
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();  // removes the lock file, then releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Whether the lock is held (false on a file system without flock, where the writer runs unlocked).
  bool held() const { return held_; }

  // `<path>.lock`: the file a writer of path holds its lock on.
  static std::string lock_path(const std::string& path);
  // Throws InputError "<path> is being written by another running minimllm (pid N)" when a running
  // writer holds path's lock; else returns (taking nothing).
  static void check_not_busy(const std::string& path);

 private:
  std::string path_;  // of the lock file
  int fd_ = -1;
  bool held_ = false;
};

// Why path could not be created, judged from its directory (missing, not writable, full), else fallback.
std::string create_failure_reason(const std::string& path, const std::string& fallback);

}  // namespace minimllm
