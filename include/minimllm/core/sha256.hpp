// SHA-256 (FIPS 180-4), for the deck's identity in provenance and checkpoints, the agreement of the ranks
// on every input's content, and the checkpoint's digests.
#pragma once

#include <cstddef>
#include <string>

namespace minimllm {

// Lower-case hex SHA-256 of bytes: the same as `sha256sum` of a file holding them.
std::string sha256_hex(const std::string& bytes);
std::string sha256_hex(const void* bytes, std::size_t size);

}  // namespace minimllm
