// The safetensors reader against files built byte by byte here (independently of our writer),
// and against every kind of damage: truncation, flipped bytes, hostile headers.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <unistd.h>

#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

using namespace memscope::model;

namespace {

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file with the given header JSON (padded to 8 bytes as the format asks) and data bytes.
std::string make_file(std::string header, const std::string& data) {
  while (header.size() % 8) header += ' ';
  return le64(header.size()) + header + data;
}

// Two tensors: "a" F32 [2,2] = 1,2,3,4 and "b" U8 [3] = 7,8,9, plus metadata.
std::string valid_file() {
  std::string data;
  for (float f : {1.0f, 2.0f, 3.0f, 4.0f}) data.append(reinterpret_cast<const char*>(&f), 4);
  data += std::string("\x07\x08\x09", 3);
  return make_file(R"({"__metadata__":{"rule":"{\"c\":8}"},)"
                   R"("b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},)"
                   R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                   data);
}

StHeader parse(const std::string& bytes) { return parse_safetensors_header(bytes, bytes.size(), "test.safetensors"); }

std::string error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors reader reads a valid file lazily, tensor by tensor", "[session]") {
  const std::string path = "/tmp/memscope-st-" + std::to_string(getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary) << valid_file();
  SafetensorsFile file(path);
  REQUIRE(file.header().tensors.size() == 2);
  CHECK(file.header().metadata.at("rule") == "{\"c\":8}");
  const StTensorInfo* a = file.find("a");
  REQUIRE(a);
  CHECK(a->dtype == StDtype::F32);
  CHECK(a->shape == std::vector<std::int64_t>{2, 2});
  auto bytes = file.read("a");
  float values[4];
  std::memcpy(values, bytes.data(), 16);
  CHECK(values[3] == 4.0f);
  CHECK(file.read("b") == std::vector<unsigned char>{7, 8, 9});
  CHECK_THROWS_WITH(file.read("zzz"), Catch::Contains("no tensor named 'zzz'"));
  std::remove(path.c_str());
}

TEST_CASE("safetensors reader names each kind of malformed header", "[session]") {
  const std::string data(16, '\0');
  CHECK_THAT(error_of("abc"), Catch::Contains("too short"));
  CHECK_THAT(error_of(le64(1ull << 40) + "{}"), Catch::Contains("100 MB"));
  CHECK_THAT(error_of(le64(64) + "{}"), Catch::Contains("past the end"));
  CHECK_THAT(error_of(make_file("{\"a\":", "")), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of(make_file("[1,2]", "")), Catch::Contains("not a JSON object"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", data)),
             Catch::Contains("unsupported dtype"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", data)),
             Catch::Contains("non-negative"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data)),
             Catch::Contains("shape needs 12 bytes"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})", data)),
             Catch::Contains("overflows"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data)),
             Catch::Contains("overlaps"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data)),
             Catch::Contains("hole"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data)),
             Catch::Contains("truncated"));
  CHECK_THAT(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data)),
             Catch::Contains("not indexed"));
  CHECK_THAT(error_of(make_file(R"({"__metadata__":{"k":1}})", "")), Catch::Contains("not a string"));
}

TEST_CASE("safetensors reader: every truncation of a valid file is a clear error", "[session]") {
  const std::string file = valid_file();
  REQUIRE_NOTHROW(parse(file));
  for (std::size_t n = 0; n < file.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    CHECK_THROWS_AS(parse(file.substr(0, n)), UserError);
  }
}

TEST_CASE("safetensors reader fuzz: random byte flips never crash or escape as another error", "[session]") {
  const std::string file = valid_file();
  std::mt19937 rng(2024);
  int rejected = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string mutated = file;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) mutated[rng() % mutated.size()] = static_cast<char>(rng() & 0xff);
    try {
      StHeader header = parse(mutated);
      // Whatever parsed must lie inside the buffer.
      for (const auto& t : header.tensors) REQUIRE(header.data_start + t.end <= mutated.size());
    } catch (const UserError&) {
      ++rejected;
    }
  }
  CHECK(rejected > 1000);  // the fuzzer did reach the error paths
}
