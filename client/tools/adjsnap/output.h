// adjsnap's one output layer: tables and lines for people, JSON for scripts (--json), errors on
// stderr. Commands print through it only.
//
// JSON, one contract for every command (docs/adjsnap-json.md, schema in
// docs/adjsnap-json.schema.json): a protobuf message becomes an object with its proto field
// names, every field present even when zero; integers are JSON numbers, except fixed64
// fields (checksums), which are 16 lower-case hex digits as the tables and the dump manifest
// print them; enum values are lower-case names without their type's prefix, words joined by
// '-' (TIER_HOST is "host", CODEC_ZFP_REVERSIBLE "zfp-reversible", as tables and the command
// line spell tiers and codecs). Everything adjsnap composes itself follows the same rules, and
// one serializer prints every document, indented.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace adjsnap::cli {

using Json = nlohmann::ordered_json;

// `message` as JSON (see above).
Json ProtoJson(const google::protobuf::Message& message);
// An enum value's name as JSON spells it: "host" for TIER_HOST.
std::string EnumJson(const google::protobuf::EnumValueDescriptor& value);
// A checksum (or any fixed64) as JSON and tables spell it: 16 lower-case hex digits.
std::string HexJson(uint64_t value);

// printf into a string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
// A count and its noun, the noun in the plural unless the count is 1: "1 run", "3 runs"
// (`plural`, when given, for nouns that take more than an "s").
std::string Counted(uint64_t n, std::string_view noun, std::string_view plural = {});

// A table for people: a header row and rows of cells, each column padded to its width
// (right-aligned unless `left`); a cell wider than its column pushes the rest right.
class Table {
 public:
  struct Column {
    std::string header;
    int width = 0;
    bool left = false;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // One row; missing cells are empty.
  void Add(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // The header and every row, each ended by a newline.
  std::string Render() const;

 private:
  std::string Row(const std::vector<std::string>& cells) const;

  const std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Where results go: stdout, as text or as JSON. Not thread-safe; one per process.
class Output {
 public:
  explicit Output(bool json) : json_(json) {}

  // Whether the user asked for JSON (--json).
  bool json() const { return json_; }

  void Text(std::string_view text);
  void Line(std::string_view line) { Text(line), Text("\n"); }
  void Print(const Table& table) { Text(table.Render()); }
  // One JSON document, indented for reading.
  void Print(const Json& value);
  // One JSON document on one line, flushed at once (JSON lines, for a stream of documents).
  void PrintLine(const Json& value);
  // Pushes what is buffered to stdout; false when stdout is gone (a closed pipe).
  bool Flush();

 private:
  const bool json_;
};

// "adjsnap COMMAND: MESSAGE" on stderr.
void Error(std::string_view command, std::string_view message);

}  // namespace adjsnap::cli
