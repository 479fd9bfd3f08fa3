// snapctl's one output layer: tables and lines for people, JSON for scripts (--json), errors on
// stderr. Commands print through it only.
//
// JSON: a protobuf message is turned into JSON by protobuf's own mapping (proto field names,
// enum names, 64-bit integers as strings, every field even when zero) and then handled as an
// nlohmann::ordered_json value like everything snapctl composes itself, so that one serializer
// prints every document. The names therefore cannot drift from the .proto, and they are the
// ones `--json` has always printed.
#pragma once

#include <google/protobuf/message.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace snapd::snapctl {

using Json = nlohmann::ordered_json;

// `message` as JSON (see above); an empty object if protobuf cannot map it.
Json ProtoJson(const google::protobuf::Message& message);

// printf into a string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

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

// "snapctl COMMAND: MESSAGE" on stderr.
void Error(std::string_view command, std::string_view message);

}  // namespace snapd::snapctl
