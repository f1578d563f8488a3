// CRC32C (Castagnoli, the checksum of iSCSI, ext4 and LevelDB): every tensor a memscope file
// holds carries one, so a flipped byte is found rather than replayed (issue 17 "Integrity").
// Uses the SSE4.2 instruction where the CPU has it, a table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace memscope::model {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

std::string crc32c_hex(uint32_t crc);                // 8 lowercase hex digits
bool parse_crc32c_hex(const std::string& text, uint32_t& out);  // false unless exactly 8 hex digits

}  // namespace memscope::model
