// Structured mutations of real frames chunks (DESIGN "Sessions": a malformed chunk is rejected with
// a clear message, never a crash or a read out of bounds). test_safetensors_mutation covers the
// safetensors layer; here most mutants stay valid safetensors (the header is re-encoded with its
// length and padding, offsets recomputed) so that the chunk-level checks of read_chunk_steps and
// decode_chunk are what decides: layout metadata, snapshot entries, dtypes, shapes, row indices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
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

#include "model/probe/frame.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"
#include "support/temp_files.h"

using namespace memscope::model;
using json = nlohmann::json;

namespace {

// A chunk as named tensors in file order plus metadata; encode() lays the data out afresh.
struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
struct Chunk {
  std::vector<Tensor> tensors;
  std::map<std::string, std::string> meta;
  Tensor* find(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string encode(const Chunk& c) {
  json header = json::object();
  header["__metadata__"] = c.meta;
  std::string data;
  for (const auto& t : c.tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  while (text.size() % 8) text += ' ';
  return le64(text.size()) + text + data;
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Chunk parse(const std::string& path, const std::string& bytes) {
  spit(path, bytes);
  const SafetensorsFile file(path);
  Chunk c;
  c.meta = file.header().metadata;
  for (const auto& t : file.header().tensors) {
    const auto raw = file.read(t);
    c.tensors.push_back({t.name, st_dtype_name(t.dtype), t.shape, std::string(raw.begin(), raw.end())});
  }
  return c;
}

MatrixSnapshot snapshot(int layer, int head, const std::string& weight, const std::string& tensor, int rows, int cols,
                        float base) {
  MatrixSnapshot m;
  m.layer = layer;
  m.head = head;
  m.weight = weight;
  m.tensor = tensor;
  m.rows = rows;
  m.cols = cols;
  m.full_rows = 2 * rows;
  m.full_cols = 2 * cols;
  for (int i = 0; i < rows * cols; ++i) m.values.push_back(base + 0.5f * static_cast<float>(i));
  return m;
}

Frame frame(int64_t step, FrameKind kind, int layers, int heads, const std::vector<std::string>& weights) {
  Frame f;
  f.step = step;
  f.kind = kind;
  f.train_step = step / 2;
  f.loss = 1.0 / static_cast<double>(step);
  f.seconds = 0.001 * static_cast<double>(step);
  if (layers > 0) {
    f.layers = layers;
    f.heads = heads;
    f.weights = weights;
    for (int i = 0; i < layers * heads * kHeadMetricCount; ++i) f.head_metrics.push_back(static_cast<float>(step + i));
    for (size_t i = 0; i < layers * heads * weights.size() * kWeightMetricCount; ++i)
      f.weight_metrics.push_back(static_cast<float>(i) - 3.0f);
  }
  return f;
}

// Two real chunks: f32 linear memory (1 layer, 2 heads, weight M) with unprobed rows and
// snapshots at some rows, and f16 MLP memory (2 layers, 1 head, weights W1, W2).
std::vector<std::string> make_bases() {
  std::vector<std::string> out;
  {
    RecordConfig config;
    ChunkBuilder b(config);
    const std::vector<std::string> w{"M"};
    b.add(frame(1, FrameKind::Train, 0, 0, {}));
    for (int64_t step = 2; step <= 7; ++step) {
      const auto kind = step % 2 ? FrameKind::Inspect : FrameKind::Train;
      Frame f = frame(step, kind, step == 5 ? 0 : 1, 2, w);
      if (step != 3 && step != 5) {
        f.matrices.push_back(snapshot(0, 0, "M", "M", 4, 4, static_cast<float>(step)));
        if (kind == FrameKind::Inspect) f.matrices.push_back(snapshot(0, 0, "M", "dM", 4, 4, -1.0f));
        f.matrices.push_back(snapshot(0, 1, "M", "S", 4, 4, 2.0f));
      }
      b.add(f);
    }
    out.push_back(b.encode("base0", 17.5));
  }
  {
    RecordConfig config;
    config.matrix_dtype = MatrixDtype::F16;
    ChunkBuilder b(config);
    const std::vector<std::string> w{"W1", "W2"};
    for (int64_t step = 10; step < 14; ++step) {
      Frame f = frame(step, FrameKind::Train, 2, 1, w);
      f.matrices.push_back(snapshot(0, 0, "W1", "M", 2, 3, 0.25f));
      f.matrices.push_back(snapshot(1, 0, "W2", "S", 3, 2, -0.25f));
      b.add(f);
    }
    out.push_back(b.encode("base1", 2.0));
  }
  return out;
}

const std::vector<std::string> kDtypes{"F32", "F16", "BF16", "I32", "I64", "U8", "F64"};

size_t dtype_size(const std::string& d) {
  StDtype t;
  REQUIRE(parse_st_dtype(d, t));
  return st_dtype_size(t);
}

// At most 2^20 elements, without overflow.
bool small(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) {
    if (d == 0) return true;
    if (d < 0 || static_cast<uint64_t>(d) > (uint64_t{1} << 20) || (n *= static_cast<uint64_t>(d)) > (uint64_t{1} << 20))
      return false;
  }
  return true;
}

uint64_t elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

enum Kind {
  kMetaValue, kWeights, kSnapshotEntry, kRows, kRowIndex, kColumnValue, kDtype, kShape, kDrop, kRename, kFormat,
  kFlip, kTruncate, kStacked, kKindCount
};
const char* const kKindNames[kKindCount] = {"metadata value", "weights", "snapshot entry", "rows", ".row index",
                                            "column value", "dtype", "shape", "drop tensor", "rename tensor",
                                            "format", "flip", "truncate", "stacked"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // A structured edit of `c`.
  void edit(Chunk& c, Kind kind) {
    switch (kind) {
      case kMetaValue: return meta_value(c);
      case kWeights: return weights(c);
      case kSnapshotEntry: return snapshot_entry(c);
      case kRows: {
        const int64_t rows = std::clamp<int64_t>(c.meta.count("rows") ? std::atoll(c.meta["rows"].c_str()) : 0, -9, 1 << 20);
        c.meta["rows"] = pick<std::string>({std::to_string(rows + 1), std::to_string(rows - 1), "0", "-1",
                                            "2147483649", "9223372036854775807", "3x", ""});
        return;
      }
      case kRowIndex: return row_index(c);
      case kColumnValue: return column_value(c);
      case kDtype: return dtype(c);
      case kShape: return shape(c);
      case kDrop:
        if (!c.tensors.empty()) c.tensors.erase(c.tensors.begin() + static_cast<long>(below(c.tensors.size())));
        return;
      case kRename: return rename(c);
      case kFormat:
        if (below(2)) c.meta.erase("format");
        else c.meta["format"] = pick<std::string>({"memscope-frames/2", "", "memscope-frames/1 "});
        return;
      default: {
        for (uint64_t i = 0, n = 2 + below(2); i < n; ++i) edit(c, static_cast<Kind>(below(kFlip)));
        return;
      }
    }
  }

  std::string flip(std::string bytes) {
    const uint64_t header = std::min<uint64_t>(bytes.size(), 8 + (bytes.size() > 8 ? le64_at(bytes) : 0));
    for (uint64_t i = 0, n = 1 + below(4); i < n; ++i) {
      const uint64_t at = below(2) ? below(std::max<uint64_t>(header, 1)) : below(bytes.size());
      bytes[at] = static_cast<char>(bytes[at] ^ (1u << below(8)));
    }
    return bytes;
  }
  std::string truncate(const std::string& bytes) { return bytes.substr(0, below(bytes.size())); }

 private:
  static uint64_t le64_at(const std::string& b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
    return std::min<uint64_t>(v, b.size());
  }
  uint64_t below(uint64_t n) { return n ? std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_) : 0; }
  template <typename T>
  T pick(const std::vector<T>& v) { return v[below(v.size())]; }
  Tensor& any(Chunk& c) { return c.tensors[below(c.tensors.size())]; }
  std::vector<Tensor*> snapshots(Chunk& c) {
    std::vector<Tensor*> out;
    for (auto& t : c.tensors)
      if (t.shape.size() == 3) out.push_back(&t);
    return out;
  }

  void meta_value(Chunk& c) {
    const std::string key = pick<std::string>({"layers", "heads", "first_step", "last_step", "wall_time", "rows",
                                               "weights", "snapshots", "extra"});
    if (below(4) == 0) {
      c.meta.erase(key);
      return;
    }
    c.meta[key] = pick<std::string>({"-1", "0", "1", "2", "3", "4096", "4097", "99999999999999999999", "abc", "",
                                     "1.5", " 2", "[]", "{}", "null", "[\"M\"]"});
  }

  void weights(Chunk& c) {
    std::string many = "[";
    for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"W" + std::to_string(i) + "\"";
    many += "]";
    c.meta["weights"] = pick<std::string>({"[1]", "[\"M\", 2]", "{}", "\"M\"", "[]", "[\"W9\"]", "[\"M\",\"M\"]",
                                           "[\"W2\",\"W1\"]", "[\"W1\"]", "[null]", "[", many, "[\"a\\nb\"]"});
  }

  void snapshot_entry(Chunk& c) {
    json s = json::parse(c.meta.count("snapshots") ? c.meta["snapshots"] : "[]", nullptr, false);
    const bool objects = s.is_array() && std::all_of(s.begin(), s.end(), [](const json& e) { return e.is_object(); });
    if (!objects || s.empty() || below(8) == 0) {
      c.meta["snapshots"] = pick<std::string>({"{}", "[", "3", "[[]]", "[null]", "[{}]", "\"x\""});
      return;
    }
    const size_t i = below(s.size());
    const std::vector<std::string> fields{"name", "layer", "head", "weight", "tensor", "full_rows", "full_cols"};
    const std::string field = pick(fields);
    switch (below(8)) {
      case 0: s[i].erase(field); break;
      case 1: s[i][field] = pick<json>({json(1), json("1"), json(1.5), json(nullptr), json::array(), json(true)}); break;
      case 2: s[i][field] = pick<json>({json(-1), json(int64_t{1} << 40), json(uint64_t{1} << 63), json(0)}); break;
      case 3: s[i]["name"] = pick<std::string>({"nope", "step", "kind", "layer0/head0/retain", "a\nb", ""}); break;
      case 4: s[i]["name"] = s[below(s.size())]["name"]; break;  // another series, or itself
      case 5: s.push_back(s[i]); break;
      case 6: s.erase(i); break;
      default: s.insert(s.begin() + static_cast<long>(i), pick<json>({json(1), json("x"), json::array()})); break;
    }
    c.meta["snapshots"] = s.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  // Points a snapshot's .row entry elsewhere: past the rows, negative, or at another valid row.
  void row_index(Chunk& c) {
    std::vector<Tensor*> rows;
    for (auto& t : c.tensors)
      if (t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, ".row") == 0 && !t.bytes.empty()) rows.push_back(&t);
    if (rows.empty()) return;
    Tensor& t = *pick(rows);
    const int64_t n = std::clamp<int64_t>(c.meta.count("rows") ? std::atoll(c.meta["rows"].c_str()) : 0, -9, 1 << 20);
    const int32_t v = pick<int32_t>({static_cast<int32_t>(n), static_cast<int32_t>(n + 1), -1, 0,
                                     std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                     static_cast<int32_t>(n - 1)});
    if (t.dtype == "I32") std::memcpy(&t.bytes[4 * below(t.bytes.size() / 4)], &v, 4);
  }

  void column_value(Chunk& c) {
    Tensor* t = c.find(pick<std::string>({"kind", "has_probes", "step", "timeline"}));
    if (!t || t->bytes.empty()) return;
    t->bytes[below(t->bytes.size())] = static_cast<char>(pick<int>({0, 1, 2, 255, 128}));
  }

  // Another dtype; the shape's last axis (or the bytes) follow so the file stays valid safetensors.
  void dtype(Chunk& c) {
    if (c.tensors.empty()) return;
    Tensor& t = below(3) == 0 && !snapshots(c).empty() ? *pick(snapshots(c)) : any(c);
    const std::string to = pick(kDtypes);
    const size_t from_size = dtype_size(t.dtype), to_size = dtype_size(to);
    t.dtype = to;
    if (!t.shape.empty() && (t.shape.back() * static_cast<int64_t>(from_size)) % static_cast<int64_t>(to_size) == 0 &&
        below(2))
      t.shape.back() = t.shape.back() * static_cast<int64_t>(from_size) / static_cast<int64_t>(to_size);
    else
      t.bytes.resize(elements(t.shape) * to_size, '\0');
  }

  void shape(Chunk& c) {
    if (c.tensors.empty()) return;
    Tensor& t = below(2) && !snapshots(c).empty() ? *pick(snapshots(c)) : any(c);
    const size_t size = dtype_size(t.dtype);
    const auto before = t.shape;
    switch (below(7)) {
      case 0: std::reverse(t.shape.begin(), t.shape.end()); break;                       // same bytes
      case 1: t.shape = {static_cast<int64_t>(elements(t.shape))}; break;                // flattened
      case 2: t.shape.push_back(1); break;                                               // extra axis
      case 3: if (!t.shape.empty()) t.shape.erase(t.shape.begin()); break;               // lost axis
      case 4: if (!t.shape.empty()) t.shape[0] += below(2) ? 1 : -1; break;             // one more or less
      case 5: if (!t.shape.empty()) t.shape[0] = 0; break;                               // empty
      default:  // zero rows but a vast matrix: only the shape product bounds it
        t.shape = {0, int64_t{1} << 40, int64_t{1} << 40};
        if (Tensor* r = c.find(t.name + ".row")) r->shape = {0}, r->bytes.clear();
        break;
    }
    for (auto& d : t.shape) d = std::max<int64_t>(d, 0);
    if (!small(t.shape)) t.shape = before;  // a 2^80-element tensor would only test the allocator
    t.bytes.resize(elements(t.shape) * size, '\0');
  }

  void rename(Chunk& c) {
    if (c.tensors.empty()) return;
    const std::string from = any(c).name;
    const std::string to = pick<std::string>({"step", "layer0/head0/retain", "layer0/head1/S", "renamed", "a\nb",
                                              from + ".row", from + "x"});
    if (to == from) return;
    for (size_t i = 0; i < c.tensors.size(); ++i)  // a name is a JSON key: the clash replaces the other
      if (c.tensors[i].name == to) {
        c.tensors.erase(c.tensors.begin() + static_cast<long>(i));
        break;
      }
    for (auto& u : c.tensors)
      if (u.name == from) {
        u.name = to;
        break;
      }
  }

  std::mt19937_64 rng_;
};

// What is wrong with a message for the file at `path`, or "".
std::string message_problem(const std::string& message, const std::string& path) {
  if (message.compare(0, path.size() + 2, path + ": ") != 0) return "does not start with the path: " + message;
  if (message.find_first_of("\r\n") != std::string::npos) return "is not one line: " + message;
  return "";
}

struct Outcome {
  enum { Accepted, RejectedHeader, RejectedChunk } result = Accepted;
  std::string problem;  // "" when the outcome is acceptable
};

Outcome decode(const std::string& path, const std::string& bytes) {
  spit(path, bytes);
  Outcome out;
  bool header_ok = false;
  try {
    SafetensorsFile file(path);
    header_ok = true;
    std::vector<int64_t> steps;
    std::vector<int32_t> timelines;
    read_chunk_steps(file, steps, timelines);
    const auto frames = decode_chunk(file);
    const int64_t rows = std::stoll(file.header().metadata.at("rows"));
    if (static_cast<int64_t>(frames.size()) != rows || steps.size() != frames.size()) out.problem = "frame count is not rows";
    for (const auto& f : frames) {
      for (const auto& m : f.matrices)
        if (m.rows < 0 || m.cols < 0 || m.values.size() != static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols))
          out.problem = "a snapshot's values are not rows·cols";
      if (!f.head_metrics.empty() &&
          (f.head_metrics.size() != static_cast<size_t>(f.layers * f.heads * kHeadMetricCount) ||
           f.weight_metrics.size() != static_cast<size_t>(f.layers * f.heads) * f.weights.size() * kWeightMetricCount))
        out.problem = "metric blocks do not match the layout";
    }
  } catch (const UserError& e) {
    out.result = header_ok ? Outcome::RejectedChunk : Outcome::RejectedHeader;
    out.problem = message_problem(e.what(), path);
  } catch (const std::exception& e) {
    out.problem = std::string("threw something other than UserError: ") + e.what();
  }
  return out;
}

std::string fresh_path(const std::string& name) {
  static const auto dir = memscope::test::fresh_dir("chunk-mutation");  // one per process, removed at exit
  return (dir / name).string();
}

std::string rejection(const std::string& path, const std::string& bytes) {
  spit(path, bytes);
  try {
    SafetensorsFile file(path);
    decode_chunk(file);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace

TEST_CASE("chunk decoder survives thousands of structured mutations", "[session]") {
  const uint64_t seed = env_or("MEMSCOPE_MUTATION_SEED", 20240612);
  const uint64_t count = env_or("MEMSCOPE_CHUNK_MUTATION_COUNT", 4000);
  const std::string path = fresh_path("mutant.safetensors");
  const auto bases = make_bases();
  std::vector<Chunk> parsed;
  for (const auto& base : bases) {  // the unmutated chunks decode, and survive a re-encode
    REQUIRE(decode(path, base).problem.empty());
    parsed.push_back(parse(path, base));
    const Outcome again = decode(path, encode(parsed.back()));
    REQUIRE(again.problem.empty());
    REQUIRE(again.result == Outcome::Accepted);
  }

  Mutator mutator(seed);
  uint64_t accepted = 0, rejected_header = 0, rejected_chunk = 0, problems = 0;
  std::map<std::string, std::array<uint64_t, 3>> by_kind;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto kind = static_cast<Kind>(i % kKindCount);
    const size_t b = (i / kKindCount) % bases.size();
    std::string mutant;
    if (kind == kFlip) mutant = mutator.flip(bases[b]);
    else if (kind == kTruncate) mutant = mutator.truncate(bases[b]);
    else {
      Chunk c = parsed[b];
      mutator.edit(c, kind);
      mutant = encode(c);
    }
    const Outcome o = decode(path, mutant);
    if (!o.problem.empty() && ++problems <= 20)
      FAIL_CHECK("mutant " << i << " (" << kKindNames[kind] << ", seed " << seed << "): " << o.problem);
    ++by_kind[kKindNames[kind]][o.result];
    (o.result == Outcome::Accepted ? accepted : o.result == Outcome::RejectedChunk ? rejected_chunk : rejected_header) += 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::ostringstream summary;
  summary << count << " chunk mutants (seed " << seed << ") in " << seconds << " s: " << accepted << " accepted, "
          << rejected_chunk << " rejected by the chunk checks, " << rejected_header << " by the safetensors header;";
  for (const auto& [name, n] : by_kind) summary << " " << name << " " << n[0] << "/" << n[2] << "/" << n[1] << ";";
  WARN(summary.str());
  CHECK(problems == 0);
  // Both outcomes must occur, and most rejections must come from the chunk checks.
  CHECK(accepted >= count / 20);
  CHECK(rejected_chunk >= count / 3);
  CHECK(rejected_header > 0);
}

// What the mutations and fuzz_session found in decode_chunk, pinned on their own.
TEST_CASE("chunk decoder rejects hostile snapshot layouts", "[session]") {
  const std::string path = fresh_path("pinned.safetensors");
  Chunk base = parse(path, make_bases()[0]);
  Tensor* m = base.find("layer0/head0/M");
  REQUIRE(m);

  SECTION("a zero-row snapshot of 2^40 x 2^40 (its rows·cols once overflowed int64)") {
    Chunk c = base;
    Tensor* t = c.find("layer0/head0/M");
    t->shape = {0, int64_t{1} << 40, int64_t{1} << 40};
    t->bytes.clear();
    Tensor* r = c.find("layer0/head0/M.row");
    r->shape = {0};
    r->bytes.clear();
    const std::string message = rejection(path, encode(c));
    CHECK(message_problem(message, path).empty());
    CHECK(message.find("should be F32/F16/BF16 [Km, rows, cols]") != std::string::npos);
  }
  SECTION("names from the metadata are quoted on one line") {
    Chunk c = base;
    json s = json::parse(c.meta["snapshots"]);
    s[0]["name"] = "a\nb";
    c.meta["snapshots"] = s.dump();
    std::string message = rejection(path, encode(c));
    CHECK(message_problem(message, path).empty());
    CHECK(message.find(R"('a\x0ab')") != std::string::npos);
    c = base;
    c.meta["weights"] = "[\"W\\u001b[2J\"]";
    message = rejection(path, encode(c));
    CHECK(message_problem(message, path).empty());
    CHECK(message.find(R"(W\x1b[2J)") != std::string::npos);
  }
  SECTION("a series listed twice") {
    Chunk c = base;
    json s = json::parse(c.meta["snapshots"]);
    s.push_back(s[0]);
    c.meta["snapshots"] = s.dump();
    CHECK(rejection(path, encode(c)).find("twice") != std::string::npos);
  }
  SECTION("has_probes other than 0 or 1") {
    Chunk c = base;
    c.find("has_probes")->bytes[1] = 2;
    CHECK(rejection(path, encode(c)).find("'has_probes' holds 2") != std::string::npos);
  }
  SECTION("a snapshot field that does not fit an int") {
    Chunk c = base;
    json s = json::parse(c.meta["snapshots"]);
    s[0]["full_rows"] = int64_t{1} << 32;
    c.meta["snapshots"] = s.dump();
    CHECK(rejection(path, encode(c)).find("snapshots entries need") != std::string::npos);
  }
}
