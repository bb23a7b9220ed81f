// Files minimllm creates or replaces, on a shared file system where another user may plant names
// (docs/HDF5.md, "Output safety"): a name is replaced only when it is a regular file (never a symbolic
// link, a device, a FIFO or a directory), and a temporary name is made with mkstemp (O_CREAT | O_EXCL,
// an unguessable suffix), so no planted link is ever followed.
#pragma once

#include <cstddef>
#include <string>

namespace minimllm {

// Throws InputError "<path>: is a symbolic link (a FIFO, ...); minimllm creates or replaces only regular
// files ...: remove it or choose another <flag>" when path exists (lstat: a link is not followed) and is
// not a regular file; returns whether a regular file is there. An empty flag reads "output path".
bool check_replaceable(const std::string& path, const std::string& flag);

// A new empty file beside path, `<path><infix>XXXXXX<suffix>` made by mkstemps (mode 0644 less the
// umask): its descriptor (O_CLOEXEC), and its name in temporary. Throws std::runtime_error naming path.
int create_temporary(const std::string& path, const std::string& infix, const std::string& suffix,
                     std::string& temporary);

// Writes bytes to path atomically: to a temporary file beside it (create_temporary), fsynced, then
// renamed over path (overwrite) or linked to it (else, so that an existing path is never replaced:
// InputError "<path>: <what> exists"), the directory fsynced. path must be absent or a regular file
// (check_replaceable, before and after writing). Throws std::runtime_error naming path and the reason,
// the temporary file removed.
void write_file_atomically(const std::string& path, const void* bytes, std::size_t size,
                           const std::string& what, const std::string& flag, bool overwrite);

// Removes what a killed writer of path left beside it: this user's regular files named
// `<path><infix>MIDDLE<suffix>`, MIDDLE 1-40 letters, digits or dots (the names create_temporary makes,
// and the `<path>.<pid>.part` and `<path>.tmp.<pid>` of before). Call it only while holding path's lock
// (FileLock::held): then no other writer of path is running. Returns how many it removed.
int remove_stale_temporaries(const std::string& path, const std::string& infix, const std::string& suffix);

// fsync of path's directory, so that a rename survives a crash of the node (best effort).
void sync_directory_of(const std::string& path);

}  // namespace minimllm
