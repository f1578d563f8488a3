// The data tasks of issue 4: token layouts checked by scanning the tokens independently of the
// generators, determinism by seed, and the errors a user meets for bad knobs and files.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "model/data/byte_tokenizer.h"
#include "model/data/rng.h"
#include "model/data/task.h"
#include "model/data/text_stream.h"
#include "model/util/errors.h"

using namespace memscope::model;

namespace {

// A file under the temp directory, removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& bytes, const std::string& name = "text") {
    path =
        std::filesystem::temp_directory_path() / ("memscope-data-" + name + "-" + std::to_string(::getpid()));
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

std::string sample_text() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + ": héllo wörld, ünïcode ✓\n";
  return text;
}

TaskConfig config_of(const std::string& kind, const std::string& text_path = "") {
  TaskConfig config;
  config.kind = kind;
  config.text_path = text_path;
  return config;
}

// Shapes, dtypes and ids every task promises.
void check_batch(const Task& task, const Batch& batch, int64_t rows) {
  const std::vector<int64_t> shape{rows, task.seq_len()};
  CHECK(batch.tokens.sizes().vec() == shape);
  CHECK(batch.targets.sizes().vec() == shape);
  CHECK(batch.query_mask.sizes().vec() == shape);
  CHECK(batch.tokens.scalar_type() == torch::kLong);
  CHECK(batch.targets.scalar_type() == torch::kLong);
  CHECK(batch.query_mask.scalar_type() == torch::kBool);
  CHECK(batch.tokens.min().item<int64_t>() >= 0);
  CHECK(batch.tokens.max().item<int64_t>() < task.vocab_size());
  const auto scored = batch.targets != kIgnoreIndex;
  CHECK(torch::all(batch.targets.masked_select(scored) >= 0).item<bool>());
  CHECK(torch::all(batch.targets.masked_select(scored) < task.vocab_size()).item<bool>());
  CHECK(torch::all(scored.logical_or(batch.query_mask.logical_not())).item<bool>());  // mask ⊆ scored
  CHECK(batch.query_mask.any().item<bool>());
}

}  // namespace

TEST_CASE("data: byte tokenizer round trip and labels", "[model][data]") {
  const ByteTokenizer tok;
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  const auto ids = tok.encode(all_bytes);
  REQUIRE(ids.size() == 256);
  CHECK(ids[200] == 200);
  CHECK(tok.decode(ids) == all_bytes);
  CHECK(tok.decode(tok.encode("héllo ✓")) == "héllo ✓");
  CHECK(tok.decode({ByteTokenizer::kBos, 'a', ByteTokenizer::kEos, ByteTokenizer::kPad}) ==
        "<bos>a<eos><pad>");
  CHECK_THROWS_AS(tok.decode({ByteTokenizer::kVocabSize}), std::out_of_range);
  CHECK(tok.token_label('a') == "a");
  CHECK(tok.token_label(' ') == " ");
  CHECK(tok.token_label('\n') == "\\x0a");
  CHECK(tok.token_label(0xe9) == "\\xe9");
  CHECK(tok.token_label(ByteTokenizer::kBos) == "<bos>");
  CHECK(tok.token_label(-3) == "?-3");
}

TEST_CASE("data: rng is reproducible, in range, unbiased, and its state round-trips", "[model][data]") {
  Rng a(42), b(42), c(43);
  const uint64_t first = a.next();
  CHECK(first == b.next());
  CHECK(first != c.next());

  // Counts of uniform(6): each within 5% of 10000 (the draw is fixed by the seed, so not flaky).
  Rng r(7);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) {
    const int64_t x = r.uniform(6);
    REQUIRE((x >= 0 && x < 6));
    ++counts[x];
  }
  for (int n : counts) CHECK(std::abs(n - 10000) < 500);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform01();
    REQUIRE((u >= 0 && u < 1));
    sum += u;
  }
  CHECK(sum / 10000 == Approx(0.5).margin(0.02));
  CHECK(r.uniform(1) == 0);
  CHECK_THROWS_AS(r.uniform(0), std::invalid_argument);

  const auto picked = r.choose(10, 10);
  CHECK(std::set<int64_t>(picked.begin(), picked.end()).size() == 10);
  CHECK(*std::max_element(picked.begin(), picked.end()) == 9);

  // A checkpointed state resumes the same stream.
  const std::string saved = r.state();
  CHECK(saved.size() == 64);
  const uint64_t x1 = r.next(), x2 = r.next();
  Rng resumed(0);
  resumed.set_state(saved);
  CHECK(resumed.state() == saved);
  CHECK(resumed.next() == x1);
  CHECK(resumed.next() == x2);
  CHECK_THROWS_AS(resumed.set_state("12ab"), UserError);
  CHECK_THROWS_AS(resumed.set_state(std::string(64, 'g')), UserError);
  CHECK_THROWS_AS(resumed.set_state(std::string(64, '0')), UserError);

  std::set<uint64_t> streams;
  for (uint64_t s = 0; s < 1000; ++s) streams.insert(Rng::mix(5, s));
  CHECK(streams.size() == 1000);
  CHECK(Rng::mix(5, 1) != Rng::mix(6, 1));
}

TEST_CASE("mqar: split vocabulary, distinct pairs, queries after the gap ask for their key's value",
          "[model][data]") {
  TaskConfig config;
  config.keys = 20;
  config.values = 12;
  config.pairs = 10;
  config.queries = 6;
  config.gap = 5;
  const auto task = make_task(config);
  CHECK(task->name() == "mqar");
  CHECK(task->seq_len() == 2 * 10 + 5 + 6);
  CHECK(task->vocab_size() == 1 + 20 + 12);
  CHECK(task->token_label(0) == "·");
  CHECK(task->token_label(1) == "k0");
  CHECK(task->token_label(21) == "v0");

  const Batch batch = task->sample(16, 3);
  check_batch(*task, batch, 16);
  const auto tokens = batch.tokens.accessor<int64_t, 2>();
  const auto targets = batch.targets.accessor<int64_t, 2>();
  const auto mask = batch.query_mask.accessor<bool, 2>();
  const auto is_key = [](int64_t id) { return id >= 1 && id <= 20; };
  const auto is_value = [](int64_t id) { return id >= 21 && id < 33; };
  for (int64_t b = 0; b < 16; ++b) {
    INFO("row " << b);
    std::map<int64_t, int64_t> stored;
    std::set<int64_t> values;
    for (int64_t i = 0; i < 10; ++i) {
      CHECK(is_key(tokens[b][2 * i]));
      CHECK(is_value(tokens[b][2 * i + 1]));
      stored[tokens[b][2 * i]] = tokens[b][2 * i + 1];
      values.insert(tokens[b][2 * i + 1]);
    }
    CHECK(stored.size() == 10);  // distinct keys
    CHECK(values.size() == 10);  // distinct values
    std::set<int64_t> asked;
    for (int64_t t = 0; t < task->seq_len(); ++t) {
      const bool query = t >= 25;
      CHECK(mask[b][t] == query);
      if (t >= 20 && t < 25) CHECK(tokens[b][t] == 0);
      if (!query) {
        CHECK(targets[b][t] == kIgnoreIndex);
        continue;
      }
      REQUIRE(stored.count(tokens[b][t]) == 1);
      CHECK(targets[b][t] == stored[tokens[b][t]]);
      asked.insert(tokens[b][t]);
    }
    CHECK(asked.size() == 6);  // distinct queries
  }
  // Over the batch the queries are not always asked in the order the pairs were stored.
  bool reordered = false;
  for (int64_t b = 0; b < 16; ++b) reordered |= tokens[b][25] != tokens[b][0];
  CHECK(reordered);
}

TEST_CASE("data: every task is a pure function of (batch, seed)", "[model][data]") {
  const TempFile file(sample_text());
  for (const char* kind : {"mqar", "needle", "copy", "text"}) {
    INFO("task " << kind);
    const auto task = make_task(config_of(kind, file.path.string()));
    const Batch a = task->sample(8, 11), again = task->sample(8, 11), other = task->sample(8, 12);
    check_batch(*task, a, 8);
    CHECK(torch::equal(a.tokens, again.tokens));
    CHECK(torch::equal(a.targets, again.targets));
    CHECK(torch::equal(a.query_mask, again.query_mask));
    CHECK_FALSE(torch::equal(a.tokens, other.tokens));
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = i + 1; j < 8; ++j) CHECK_FALSE(torch::equal(a.tokens[i], a.tokens[j]));
    // Row b does not depend on the batch size.
    CHECK(torch::equal(task->sample(3, 11).tokens, a.tokens.slice(0, 0, 3)));
  }
}

TEST_CASE("needle: the last target is the planted value", "[model][data]") {
  TaskConfig config = config_of("needle");
  config.seq_len = 40;
  config.keys = 5;
  const auto task = make_task(config);
  const Batch batch = task->sample(32, 9);
  check_batch(*task, batch, 32);
  const auto tokens = batch.tokens.accessor<int64_t, 2>();
  std::set<int64_t> places;
  for (int64_t b = 0; b < 32; ++b) {
    INFO("row " << b);
    const int64_t query = tokens[b][39];
    CHECK((query >= 1 && query <= 5));
    // The only value token in the row, right after the only earlier copy of the query key.
    int64_t value_at = -1, key_copies = 0;
    for (int64_t t = 0; t < 39; ++t) {
      if (tokens[b][t] > 5) {
        CHECK(value_at == -1);
        value_at = t;
      }
      key_copies += tokens[b][t] == query;
    }
    REQUIRE(value_at >= 1);
    CHECK(key_copies == 1);
    CHECK(tokens[b][value_at - 1] == query);
    CHECK(batch.targets[b][39].item<int64_t>() == tokens[b][value_at]);
    CHECK(batch.query_mask[b].nonzero().numel() == 1);
    CHECK(batch.query_mask[b][39].item<bool>());
    places.insert(value_at);
  }
  CHECK(places.size() > 8);  // the needle moves
}

TEST_CASE("copy: targets are the content tokens in order after the marker", "[model][data]") {
  TaskConfig config = config_of("copy");
  config.seq_len = 30;
  config.copy_tokens = 6;
  config.values = 9;
  const auto task = make_task(config);
  CHECK(task->vocab_size() == 11);
  const Batch batch = task->sample(16, 21);
  check_batch(*task, batch, 16);
  const auto tokens = batch.tokens.accessor<int64_t, 2>();
  const auto targets = batch.targets.accessor<int64_t, 2>();
  const auto mask = batch.query_mask.accessor<bool, 2>();
  for (int64_t b = 0; b < 16; ++b) {
    INFO("row " << b);
    std::vector<int64_t> content;
    int64_t t = 0;
    for (; tokens[b][t] != 1; ++t) {
      if (tokens[b][t] != 0) content.push_back(tokens[b][t]);
      CHECK(targets[b][t] == kIgnoreIndex);
    }
    CHECK(t == 30 - 6 - 1);  // the marker
    CHECK_FALSE(mask[b][t]);
    REQUIRE(content.size() == 6);
    for (int64_t i = 0; i < 6; ++i) {
      CHECK(tokens[b][t + 1 + i] == 0);
      CHECK(targets[b][t + 1 + i] == content[i]);
      CHECK(mask[b][t + 1 + i]);
    }
  }
}

TEST_CASE("text: windows are consecutive bytes of the file", "[model][data]") {
  const std::string text = sample_text();
  const TempFile file(text);
  TaskConfig config = config_of("text", file.path.string());
  config.seq_len = 50;
  const auto task = make_task(config);
  CHECK(task->vocab_size() == ByteTokenizer::kVocabSize);
  CHECK(task->token_label('\n') == "\\x0a");
  const Batch batch = task->sample(6, 4);
  check_batch(*task, batch, 6);
  CHECK(torch::all(batch.query_mask).item<bool>());
  for (int64_t b = 0; b < 6; ++b) {
    std::string window;
    for (int64_t t = 0; t < 50; ++t) window += static_cast<char>(batch.tokens[b][t].item<int64_t>());
    window += static_cast<char>(batch.targets[b][49].item<int64_t>());
    const auto at = text.find(window);
    REQUIRE(at != std::string::npos);
    for (int64_t t = 0; t < 50; ++t)
      CHECK(batch.targets[b][t].item<int64_t>() == static_cast<unsigned char>(text[at + t + 1]));
  }
}

TEST_CASE("data: bad knobs throw UserError naming the knob", "[model][data]") {
  const TempFile file("short file\n");
  const std::vector<std::pair<std::function<void(TaskConfig&)>, std::string>> cases{
      {[](TaskConfig& c) { c.kind = "sort"; }, "task.kind:"},
      {[](TaskConfig& c) { c.keys = 0; }, "task.keys:"},
      {[](TaskConfig& c) { c.values = -1; }, "task.values:"},
      {[](TaskConfig& c) { c.pairs = 0; }, "task.pairs:"},
      {[](TaskConfig& c) { c.pairs = 65; }, "task.pairs: must be <= task.keys (64), got 65"},
      {[](TaskConfig& c) { c.values = 4; }, "task.pairs: must be <= task.values (4), got 8"},
      {[](TaskConfig& c) { c.queries = 12; }, "task.queries: must be <= task.pairs (8), got 12"},
      {[](TaskConfig& c) { c.queries = 0; }, "task.queries:"},
      {[](TaskConfig& c) { c.gap = -1; }, "task.gap:"},
      {[](TaskConfig& c) {
         c.kind = "needle";
         c.keys = 1;
       },
       "task.keys:"},
      {[](TaskConfig& c) {
         c.kind = "needle";
         c.seq_len = 2;
       },
       "task.seq_len:"},
      {[](TaskConfig& c) {
         c.kind = "copy";
         c.copy_tokens = 0;
       },
       "task.copy_tokens:"},
      {[](TaskConfig& c) {
         c.kind = "copy";
         c.seq_len = 16;
       },
       "task.seq_len:"},
      {[](TaskConfig& c) {
         c.kind = "copy";
         c.values = 0;
       },
       "task.values:"},
      {[](TaskConfig& c) { c.kind = "text"; }, "task.text_path:"},
      {[](TaskConfig& c) {
         c.kind = "text";
         c.text_path = "x";
         c.seq_len = 0;
       },
       "task.seq_len:"},
      {[&](TaskConfig& c) {
         c.kind = "text";
         c.text_path = file.path.string();
       },
       "task.text_path: '" + file.path.string() + "' has 11 bytes"},
  };
  for (const auto& [change, message] : cases) {
    TaskConfig config;
    change(config);
    INFO("expecting " << message);
    CHECK_THROWS_WITH(make_task(config), Catch::StartsWith(message));
    CHECK_THROWS_AS(make_task(config), UserError);
  }
  CHECK_NOTHROW(make_task(TaskConfig{}));
}

TEST_CASE("text: a missing file and invalid UTF-8 throw UserError naming the path", "[model][data]") {
  const std::string missing = "/nonexistent/memscope/corpus.txt";
  CHECK_THROWS_AS(make_task(config_of("text", missing)), UserError);
  CHECK_THROWS_WITH(make_task(config_of("text", missing)),
                    Catch::Contains("task.text_path:") && Catch::Contains(missing));
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH(make_task(config_of("text", dir)), Catch::Contains("cannot read"));

  std::string text = sample_text();
  text[100] = '\xff';
  const TempFile bad(text, "bad");
  CHECK_THROWS_AS(make_task(config_of("text", bad.path.string())), UserError);
  CHECK_THROWS_WITH(make_task(config_of("text", bad.path.string())),
                    Catch::Contains(bad.path.string()) && Catch::Contains("at byte 100"));

  CHECK(first_invalid_utf8("plain ascii") == std::string_view::npos);
  CHECK(first_invalid_utf8("h\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x99\x82") ==
        std::string_view::npos);                         // é ✓ 🙂
  CHECK(first_invalid_utf8("ab\x80") == 2);              // stray continuation byte
  CHECK(first_invalid_utf8("ab\xe2\x9c") == 2);          // truncated at the end
  CHECK(first_invalid_utf8("a\xe2(\x93") == 1);          // continuation missing
  CHECK(first_invalid_utf8("a\xc0\xaf") == 1);           // overlong "/"
  CHECK(first_invalid_utf8("\xed\xa0\x80") == 0);        // surrogate U+D800
  CHECK(first_invalid_utf8("xy\xf4\x90\x80\x80") == 2);  // past U+10FFFF
}
