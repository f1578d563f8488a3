// Structured mutations of valid safetensors files (DESIGN "Sessions": the reader rejects any
// malformed file with a clear message and never reads out of bounds). Random byte flips alone
// rarely get past the JSON parser, so most mutations here edit the header as JSON or as text,
// where the interesting checks (offsets, shapes, dtypes, metadata) live. Every mutant goes
// through both entry points, parse_safetensors_header and SafetensorsFile, which must agree.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "model/session/safetensors_reader.h"
#include "model/session/safetensors_writer.h"
#include "model/util/errors.h"

using namespace memscope::model;
using json = nlohmann::json;

namespace {

constexpr const char* kWhere = "mutant.safetensors";
// JSON edits re-dump the header, and nlohmann's dump recurses; past this size or this nesting (a
// stacked deep-nesting edit) only byte and text edits apply. The depth bound matters under
// AddressSanitizer, whose larger frames overflow the stack at a few thousand levels.
constexpr std::size_t kMaxJsonEditHeader = 64 * 1024;
constexpr int kMaxJsonEditDepth = 64;

// The deepest bracket nesting of a JSON text (strings skipped).
int nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::uint64_t le64_at(const std::string& bytes) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file cut into its header text and data section; false when the length prefix is unusable.
struct Parts {
  std::string header;
  std::string data;
};

bool split(const std::string& bytes, Parts& out) {
  if (bytes.size() < 8) return false;
  const std::uint64_t n = le64_at(bytes);
  if (n > bytes.size() - 8) return false;
  out.header = bytes.substr(8, n);
  out.data = bytes.substr(8 + n);
  return true;
}

std::string join(std::string header, const std::string& data, bool pad) {
  while (pad && header.size() % 8) header += ' ';
  return le64(header.size()) + header + data;
}

// Byte flips can leave invalid UTF-8 in a name that a later edit re-dumps.
std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Valid files from our own writer: every dtype, multi-dim and zero-size shapes, metadata.
std::vector<std::string> make_bases(const std::string& dir) {
  torch::manual_seed(11);
  const std::vector<std::pair<NamedTensors, std::map<std::string, std::string>>> specs = {
      {{{"layer0/head0/M", torch::randn({2, 3, 4})},
        {"half", torch::randn({5}).to(torch::kFloat16)},
        {"brain", torch::randn({3, 2}).to(torch::kBFloat16)},
        {"i32", torch::randint(-9, 9, {4}, torch::kInt32)},
        {"i64", torch::randint(-99, 99, {2, 2}, torch::kInt64)},
        {"u8", torch::randint(0, 255, {7}, torch::kUInt8)},
        {"empty", torch::zeros({0, 4})}},
       {{"first_step", "12"}, {"wall", "0.25"}}},
      {{{"x", torch::randint(0, 255, {1}, torch::kUInt8)}}, {}},
      {{{"z", torch::zeros({0})},
        {"w", torch::zeros({3, 0, 2}, torch::kInt64)},
        {"s", torch::ones({1, 1}, torch::kFloat16)},
        {"layer1/head2/gate", torch::randn({4, 1})}},
       {{"note", "zero-size tensors"}}},
  };
  std::vector<std::string> bases;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string path = dir + "/base" + std::to_string(i) + ".safetensors";
    write_safetensors(path, specs[i].first, specs[i].second);
    bases.push_back(slurp(path));
  }
  return bases;
}

enum Kind {
  kFlipHeader, kFlipData, kTruncate, kAppend, kHeaderLength, kShiftOffsets, kBadOffsets, kDtype, kShape,
  kDuplicateKey, kMetadata, kDeepNesting, kRemove, kRename, kTextEdit, kExtra, kStacked, kKindCount
};
const char* const kKindNames[kKindCount] = {
    "flip header", "flip data", "truncate", "append", "header length", "shift offsets", "bad offsets", "dtype",
    "shape", "duplicate key", "metadata", "deep nesting", "remove", "rename", "text edit", "extra", "stacked"};

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  // One mutant of `bytes`; `kind` is the top-level mutation applied.
  std::string mutate(const std::string& bytes, Kind kind) {
    if (kind == kStacked) {
      std::string out = bytes;
      for (std::uint64_t i = 0, n = 2 + below(3); i < n; ++i) out = mutate(out, static_cast<Kind>(below(kStacked)));
      return out;
    }
    Parts parts;
    const bool ok = split(bytes, parts);
    switch (kind) {
      case kFlipHeader: return flip(bytes, 0, ok ? 8 + parts.header.size() : bytes.size());
      case kFlipData: return ok && !parts.data.empty() ? flip(bytes, 8 + parts.header.size(), bytes.size()) : append(bytes);
      case kTruncate: return bytes.empty() ? append(bytes) : bytes.substr(0, below(bytes.size()));
      case kAppend: return append(bytes);
      case kHeaderLength: return header_length(bytes, ok ? parts.header.size() : 0);
      case kTextEdit: return ok ? join(text_edit(parts.header), parts.data, coin()) : flip(bytes, 0, bytes.size());
      default: break;
    }
    json h;
    if (ok && parts.header.size() <= kMaxJsonEditHeader && nesting_depth(parts.header) <= kMaxJsonEditDepth)
      h = json::parse(parts.header, nullptr, false);
    if (!ok || h.is_discarded() || !h.is_object())
      return ok ? join(text_edit(parts.header), parts.data, coin()) : flip(bytes, 0, bytes.size());
    std::string text;  // set by edits that must work on text (duplicate keys, deep nesting)
    switch (kind) {
      case kShiftOffsets: shift_offsets(h); break;
      case kBadOffsets: bad_offsets(h); break;
      case kDtype: dtype(h); break;
      case kShape: shape(h); break;
      case kDuplicateKey: text = duplicate_key(h); break;
      case kMetadata: metadata(h); break;
      case kDeepNesting: text = deep_nesting(h); break;
      case kRemove: remove(h); break;
      case kRename: rename(h); break;
      case kExtra: extra(h, parts.data); break;
      default: break;
    }
    return join(text.empty() ? dumped(h) : text, parts.data, below(4) != 0);
  }

 private:
  std::mt19937_64 rng_;

  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }
  bool coin() { return below(2) == 0; }
  template <typename T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

  std::vector<std::string> tensor_keys(const json& h) {
    std::vector<std::string> keys;
    for (auto it = h.begin(); it != h.end(); ++it)
      if (it.key() != "__metadata__" && it->is_object()) keys.push_back(it.key());
    return keys;
  }

  std::string flip(std::string bytes, std::uint64_t from, std::uint64_t to) {
    if (to <= from) return append(bytes);
    for (std::uint64_t i = 0, n = 1 + below(4); i < n; ++i) bytes[from + below(to - from)] ^= static_cast<char>(1 + below(255));
    return bytes;
  }

  std::string append(std::string bytes) {
    const std::uint64_t n = coin() ? 1 + below(16) : 1 + below(4096);
    for (std::uint64_t i = 0; i < n; ++i) bytes += static_cast<char>(below(256));
    return bytes;
  }

  std::string header_length(std::string bytes, std::uint64_t n) {
    if (bytes.size() < 8) bytes.resize(8, '\0');
    const std::uint64_t size = bytes.size();
    const std::vector<std::uint64_t> choices = {
        0, 1, n - 1, n + 1, n + 8, size - 8, size - 7, size, kMaxSafetensorsHeader, kMaxSafetensorsHeader + 1,
        1ull << 32, 1ull << 63, std::numeric_limits<std::uint64_t>::max(), rng_(), below(size)};
    const std::string prefix = le64(pick(choices));
    std::copy(prefix.begin(), prefix.end(), bytes.begin());
    return bytes;
  }

  // Offsets moved so that tensors overlap, leave holes or run past the data, or go negative.
  void shift_offsets(json& h) {
    const auto keys = tensor_keys(h);
    if (keys.empty()) return remove(h);
    json& entry = h[pick(keys)];
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      return bad_offsets(h);
    json& offsets = entry["data_offsets"];
    if (below(5) == 0 && keys.size() > 1) {  // take another tensor's place
      offsets = h[pick(keys)]["data_offsets"];
      return;
    }
    const std::vector<std::int64_t> deltas = {-1, 1, -2, 2, -4, 4, -8, 8, -1000, 1000, 1ll << 32, -(1ll << 40)};
    const std::int64_t delta = pick(deltas);
    for (int i = 0; i < 2; ++i) {
      if (below(3) == 0 || !offsets[i].is_number_integer()) continue;
      offsets[i] = offsets[i].get<std::int64_t>() + delta;  // may go negative, which is the point
    }
  }

  void bad_offsets(json& h) {
    const auto keys = tensor_keys(h);
    if (keys.empty()) return remove(h);
    json& entry = h[pick(keys)];
    const json old = entry.value("data_offsets", json::array({0, 0}));
    const json b = old.is_array() && !old.empty() ? old[0] : json(0);
    const json e = old.is_array() && old.size() > 1 ? old[1] : json(0);
    const std::vector<json> choices = {
        json::array({-1, e}), json::array({b, -5}), json::array({1.5, e}), json::array({"0", e}), json::array({b}),
        json::array({b, e, e}), json::object(), json(nullptr), json::array({e, b}), json::array(),
        json::array({std::numeric_limits<std::uint64_t>::max(), std::numeric_limits<std::uint64_t>::max()}),
        json::array({std::numeric_limits<std::uint64_t>::max(), 0}), json::array({0, 1ull << 63}),
        json::array({b, true}), json("0,4")};
    entry["data_offsets"] = pick(choices);
  }

  void dtype(json& h) {
    const auto keys = tensor_keys(h);
    if (keys.empty()) return remove(h);
    json& entry = h[pick(keys)];
    if (below(8) == 0) {
      entry.erase("dtype");
      return;
    }
    // Half the time another valid dtype, which is accepted exactly when the sizes match.
    const std::vector<json> valid = {"F32", "F16", "BF16", "I32", "I64", "U8", "F64"};
    const std::vector<json> invalid = {"C64", "f32", "", "BOOL", "F32 ", 32, nullptr, json::array({"F32"}), "U8\n"};
    entry["dtype"] = coin() ? pick(valid) : pick(invalid);
  }

  void shape(json& h) {
    const auto keys = tensor_keys(h);
    if (keys.empty()) return remove(h);
    json& entry = h[pick(keys)];
    json& s = entry["shape"];
    if (!s.is_array()) s = json::array();
    const std::int64_t big = 1ll << 62;
    switch (below(12)) {
      case 0: s.push_back(1); break;  // accepted: same byte count
      case 1: s.push_back(2); break;
      case 2: s.push_back(0); break;
      case 3: if (!s.empty()) s.erase(s.size() - 1); break;
      case 4: if (!s.empty()) s[below(s.size())] = s[0].is_number_integer() ? s[0].get<std::int64_t>() + 1 : 1; break;
      case 5: if (!s.empty()) s[below(s.size())] = -1; else s.push_back(-1); break;
      case 6: s.push_back(1.5); break;
      case 7: s.push_back("3"); break;
      case 8: s = json::array({big, big, big}); break;  // overflows 64 bits
      case 9: s = json::array({std::numeric_limits<std::uint64_t>::max()}); break;
      case 10: s = coin() ? json(5) : json::object(); break;
      default: entry.erase("shape"); break;
    }
  }

  // nlohmann keeps the last of duplicate keys, so the copy goes either before or after.
  std::string duplicate_key(const json& h) {
    const auto keys = tensor_keys(h);
    std::string key = keys.empty() || below(4) == 0 ? "__metadata__" : pick(keys);
    json copy = h.contains(key) ? h[key] : json::object();
    if (coin() && copy.is_object() && copy.contains("data_offsets") && copy["data_offsets"].is_array() &&
        copy["data_offsets"].size() == 2 && copy["data_offsets"][1].is_number_integer())
      copy["data_offsets"][1] = copy["data_offsets"][1].get<std::int64_t>() + 4;
    else if (coin())
      copy = "not an entry";
    const std::string pair = dumped(json(key)) + ":" + dumped(copy);
    std::string text = dumped(h);
    if (coin() || text == "{}") return "{" + pair + (text == "{}" ? "}" : "," + text.substr(1));
    return text.substr(0, text.size() - 1) + "," + pair + "}";
  }

  void metadata(json& h) {
    json& m = h["__metadata__"];
    if (!m.is_object()) m = json::object();
    const std::vector<json> values = {42, nullptr, true, json::array({"a"}), json::object({{"k", "v"}}), 1.5,
                                      "", std::string(10000, 'm'), "line\nbreak", "\x01\x1b[2J"};
    switch (below(4)) {
      case 0: m = coin() ? json("not an object") : (coin() ? json::array() : json(7)); break;
      case 1: h.erase("__metadata__"); break;
      default: m["k" + std::to_string(below(3))] = pick(values); break;
    }
  }

  // Deeply nested arrays in places the reader ignores (an extra entry field, accepted), rejects
  // (a top-level key, a metadata value) or where the JSON never closes.
  std::string deep_nesting(json& h) {
    const std::vector<std::uint64_t> depths = {16, 256, 4096, 20000};
    const std::uint64_t depth = pick(depths);
    const std::string nest = std::string(depth, '[') + std::string(depth, ']');
    const auto keys = tensor_keys(h);
    const std::uint64_t where = below(4);
    if (where == 0 && !keys.empty()) {
      h[pick(keys)]["nest"] = "@@NEST@@";
    } else if (where == 1) {
      h["__metadata__"] = json::object({{"nest", "@@NEST@@"}});
    } else if (where == 2) {
      h["nest"] = "@@NEST@@";
    } else {
      return dumped(h).substr(0, dumped(h).size() - 1) + ",\"nest\":" + std::string(depth, '[');
    }
    std::string text = dumped(h);
    text.replace(text.find("\"@@NEST@@\""), 10, nest);
    return text;
  }

  void remove(json& h) {
    const auto keys = tensor_keys(h);
    const std::uint64_t choice = below(4);
    if (choice == 0 || keys.empty()) {
      h = json::object();
    } else if (choice == 1) {
      h.erase(pick(keys));  // accepted only for a zero-size tensor
    } else {
      const char* fields[] = {"dtype", "shape", "data_offsets"};
      h[pick(keys)].erase(fields[below(3)]);
    }
  }

  // Names a message will quote: control characters, quotes, non-ASCII, the metadata key.
  void rename(json& h) {
    const auto keys = tensor_keys(h);
    if (keys.empty()) return metadata(h);
    const std::string from = pick(keys);
    const std::vector<std::string> names = {"", "a\nb", "tab\there", "\x1b[31mred", "quote'\"s", "\xc3\xbc" "n" "\xc3\xaf" "code",
                                            "__metadata__", std::string(1000, 'n'), "cr\rlf", "nul\0x", pick(keys)};
    std::string to = pick(names);
    if (to == "nul") to = std::string("nul\0x", 5);
    json entry = h[from];
    h.erase(from);
    // A rename alone is valid; a broken dtype alongside makes the reader quote the new name.
    if (coin() && entry.is_object()) entry["dtype"] = "BOOL";
    h[to] = entry;
  }

  std::string text_edit(std::string text) {
    static const std::string alphabet = "{}[]:,\"-.0123456789eE \\ntfu";
    for (std::uint64_t i = 0, n = 1 + below(3); i < n; ++i) {
      const std::uint64_t at = below(text.size() + 1);
      switch (below(4)) {
        case 0: if (at < text.size()) text.erase(at, 1); break;
        case 1: text.insert(at, 1, alphabet[below(alphabet.size())]); break;
        case 2: {  // a digit for a digit: offsets and shapes change but the JSON stays valid
          const auto d = text.find_first_of("0123456789", at);
          if (d != std::string::npos) text[d] = static_cast<char>('0' + below(10));
          break;
        }
        default:
          if (at < text.size()) text.insert(at, text.substr(at, 1 + below(16)));
          break;
      }
    }
    return text;
  }

  // Fields the reader ignores (accepted), non-object entries, and a new tensor over new data.
  void extra(json& h, std::string& data) {
    const auto keys = tensor_keys(h);
    switch (below(4)) {
      case 0:
        if (!keys.empty()) h[pick(keys)]["note"] = json::array({1, "two", nullptr});
        break;
      case 1: h["scalar"] = coin() ? json(5) : json("F32"); break;
      case 2: h["empty_u8"] = {{"dtype", "U8"}, {"shape", {0}}, {"data_offsets", {0, 0}}}; break;
      default: {
        const std::uint64_t n = 1 + below(32), at = data.size();
        for (std::uint64_t i = 0; i < n; ++i) data += static_cast<char>(below(256));
        h["tail"] = {{"dtype", "U8"}, {"shape", {n}}, {"data_offsets", {at, at + n}}};
        break;
      }
    }
  }
};

// What is wrong with a message, or "": one printable line that starts with the file's name.
std::string message_problem(const std::string& message, const std::string& where) {
  if (message.size() <= where.size() + 2 || message.compare(0, where.size() + 2, where + ": ") != 0)
    return "message does not start with '" + where + ": '";
  for (unsigned char c : message)
    if (c < 0x20 || c == 0x7f) return "message is not one printable line";
  return "";
}

// What is wrong with an accepted header, or "": tensors inside the data, sized by their shape,
// and disjoint.
std::string layout_problem(const StHeader& h, std::uint64_t file_size) {
  if (h.data_start < 8 || h.data_start > file_size) return "data section starts outside the file";
  const std::uint64_t data_size = file_size - h.data_start;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& t : h.tensors) {
    if (t.begin > t.end || t.end > data_size) return "tensor '" + t.name + "' lies outside the data section";
    if (t.end - t.begin != t.elements() * st_dtype_size(t.dtype)) return "tensor '" + t.name + "' size does not match its shape";
    if (t.end > t.begin) ranges.emplace_back(t.begin, t.end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return "tensors overlap";
  return "";
}

struct Outcome {
  bool accepted = false;
  std::string problem;  // empty when the outcome is one the reader may give
  StHeader header;
};

Outcome through_bytes(const std::string& bytes) {
  Outcome out;
  try {
    out.header = parse_safetensors_header(bytes, bytes.size(), kWhere);
    out.accepted = true;
    out.problem = layout_problem(out.header, bytes.size());
  } catch (const UserError& e) {
    out.problem = message_problem(e.what(), kWhere);
  } catch (const std::exception& e) {
    out.problem = std::string("escaped as another exception: ") + e.what();
  }
  return out;
}

Outcome through_file(const std::string& path, const std::string& bytes) {
  Outcome out;
  spit(path, bytes);
  try {
    SafetensorsFile file(path);
    out.header = file.header();
    out.accepted = true;
  } catch (const UserError& e) {
    out.problem = message_problem(e.what(), path);
    return out;
  } catch (const std::exception& e) {
    out.problem = std::string("escaped as another exception: ") + e.what();
    return out;
  }
  out.problem = layout_problem(out.header, bytes.size());
  if (!out.problem.empty()) return out;
  try {
    SafetensorsFile file(path);
    for (const auto& t : file.header().tensors) {
      const auto got = file.read(t);
      if (got.size() != t.end - t.begin) return out.problem = "read returned the wrong size", out;
      if (!got.empty() && std::memcmp(got.data(), bytes.data() + file.header().data_start + t.begin, got.size()) != 0)
        return out.problem = "read returned other bytes", out;
    }
  } catch (const std::exception& e) {
    // A flipped data byte under a checksum is found at read: the one refusal a read may make.
    if (std::string(e.what()).find("fails its CRC32C checksum") != std::string::npos) return out;
    out.problem = std::string("read of an accepted file threw: ") + e.what();
  }
  return out;
}

std::string printable(const std::string& s, std::size_t limit = 160) {
  std::string out;
  for (unsigned char c : s.substr(0, limit)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return s.size() > limit ? out + "..." : out;
}

// SafetensorsFile once leaked its descriptor for every file it rejected.
std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace

TEST_CASE("safetensors reader survives thousands of structured mutations", "[session]") {
  // MEMSCOPE_MUTATION_SEED / _COUNT explore further without changing the default run.
  const std::uint64_t seed = env_or("MEMSCOPE_MUTATION_SEED", 20240611);
  const std::uint64_t count = env_or("MEMSCOPE_MUTATION_COUNT", 6000);
  const std::string dir = "/tmp/memscope-mutation-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const auto bases = make_bases(dir);
  const std::string path = dir + "/mutant.safetensors";

  for (const auto& base : bases) {  // the unmutated files must pass, or every count below is moot
    REQUIRE(through_bytes(base).accepted);
    REQUIRE(through_file(path, base).problem.empty());
  }

  const std::size_t fds_before = open_fds();
  Mutator mutator(seed);
  std::uint64_t accepted = 0, rejected = 0, problems = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_kind;  // accepted, rejected
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < count; ++i) {
    const Kind kind = static_cast<Kind>(i % kKindCount);
    const std::string mutant = mutator.mutate(bases[(i / kKindCount) % bases.size()], kind);
    const Outcome a = through_bytes(mutant);
    const Outcome b = through_file(path, mutant);
    std::string problem = !a.problem.empty() ? "bytes: " + a.problem : !b.problem.empty() ? "file: " + b.problem : "";
    if (problem.empty() && a.accepted != b.accepted) problem = "parse_safetensors_header and SafetensorsFile disagree";
    if (problem.empty() && a.accepted && a.header.tensors.size() != b.header.tensors.size())
      problem = "parse_safetensors_header and SafetensorsFile see different tensors";
    if (!problem.empty() && ++problems <= 20) {
      const std::uint64_t n = mutant.size() >= 8 ? le64_at(mutant) : 0;
      FAIL_CHECK("mutant " << i << " (" << kKindNames[kind] << ", seed " << seed << "): " << printable(problem)
                           << "\n  header: " << printable(mutant.substr(8, std::min<std::uint64_t>(n, 400))));
    }
    (a.accepted ? accepted : rejected) += 1;
    (a.accepted ? by_kind[kKindNames[kind]].first : by_kind[kKindNames[kind]].second) += 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::filesystem::remove_all(dir);

  std::ostringstream summary;
  summary << count << " mutants (seed " << seed << ") in " << seconds << " s: " << accepted << " accepted, "
          << rejected << " rejected;";
  for (const auto& [kind, n] : by_kind) summary << " " << kind << " " << n.first << "/" << n.second << ";";
  WARN(summary.str());
  CHECK(problems == 0);
  CHECK(open_fds() == fds_before);
  // Both outcomes must be common, or the mutations have stopped testing anything.
  CHECK(accepted >= count / 20);
  CHECK(rejected >= count / 2);
}

// The two faults the mutations above found, pinned on their own.
TEST_CASE("safetensors reader quotes hostile tensor names on one line", "[session]") {
  const std::string header = R"({"a\nb\u001b[2J":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})";
  const std::string bytes = join(header, "x", true);
  std::string message;
  try {
    parse_safetensors_header(bytes, bytes.size(), kWhere);
  } catch (const UserError& e) {
    message = e.what();
  }
  CHECK(message_problem(message, kWhere).empty());
  CHECK(message.find(R"('a\x0ab\x1b[2J')") != std::string::npos);
}

TEST_CASE("SafetensorsFile closes the file when it rejects it", "[session]") {
  const std::string path = "/tmp/memscope-mutation-fd-" + std::to_string(getpid()) + ".safetensors";
  spit(path, join("{\"x\":1}", "", true));
  const std::size_t before = open_fds();
  for (int i = 0; i < 10; ++i) CHECK_THROWS_AS(SafetensorsFile(path), UserError);
  CHECK(open_fds() == before);
  std::remove(path.c_str());
}
