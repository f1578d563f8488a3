// What integrity costs (issue 17), one JSON line each:
//   fsync   time per atomic file write with fsync (data, then the directory) against the same write
//           without it, for a session chunk's size and a checkpoint's, interleaved reps, as a ratio
//   crc32c  checksum throughput in GB/s (hardware SSE4.2 where present), against memcpy's
// Flags: --dir D (where to write; default the temporary directory: measure the disk you record to),
//        --reps R, --chunk-mb X, --checkpoint-mb Y.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "model/session/crc32c.h"
#include "model/session/safetensors_blob_writer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

using memscope::bench::median;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The write memscope did before fsync: temporary file, write, close, rename.
void write_without_fsync(const fs::path& path, const std::string& bytes) {
  const std::string tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t done = 0;
  while (fd >= 0 && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::temp_directory_path();
  int reps = 15;
  double chunk_mb = 2.0, checkpoint_mb = 1.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dir") dir = value;
    else if (flag == "--reps") reps = std::stoi(value);
    else if (flag == "--chunk-mb") chunk_mb = std::stod(value);
    else if (flag == "--checkpoint-mb") checkpoint_mb = std::stod(value);
  }
  const fs::path work = dir / ("memscope-durability-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::mt19937_64 rng(1);

  for (const auto& [what, mb] : {std::pair<const char*, double>{"chunk", chunk_mb}, {"checkpoint", checkpoint_mb}}) {
    std::string bytes(static_cast<size_t>(mb * (1 << 20)), '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    std::vector<double> durable, plain;
    for (int r = 0; r < reps; ++r) {  // interleaved, so drift in the machine hits both alike
      auto t = Clock::now();
      memscope::model::write_file_atomically(work / "durable.bin", bytes);
      durable.push_back(since(t));
      t = Clock::now();
      write_without_fsync(work / "plain.bin", bytes);
      plain.push_back(since(t));
    }
    std::cout << nlohmann::json{{"bench", "fsync"}, {"file", what}, {"bytes", bytes.size()}, {"reps", reps},
                                {"dir", dir.string()}, {"ms_with_fsync", median(durable) * 1e3},
                                {"ms_without", median(plain) * 1e3}, {"ratio", median(durable) / median(plain)},
                                {"ms_added", (median(durable) - median(plain)) * 1e3}}
                     .dump()
              << std::endl;
  }

  std::vector<unsigned char> data(64u << 20);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  std::vector<unsigned char> copy(data.size());
  std::vector<double> crc_s, copy_s;
  uint32_t sink = 0;
  for (int r = 0; r < 5; ++r) {
    auto t = Clock::now();
    sink ^= memscope::model::crc32c(data.data(), data.size());
    crc_s.push_back(since(t));
    t = Clock::now();
    std::memcpy(copy.data(), data.data(), data.size());
    copy_s.push_back(since(t));
  }
  const double gb = static_cast<double>(data.size()) / 1e9;
  std::cout << nlohmann::json{{"bench", "crc32c"}, {"bytes", data.size()}, {"gb_per_s", gb / median(crc_s)},
                              {"memcpy_gb_per_s", gb / median(copy_s)}, {"check", sink ^ copy[0]}}
                   .dump()
            << std::endl;
  fs::remove_all(work);
  return 0;
}
