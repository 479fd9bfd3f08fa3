#include "output.h"

#include <google/protobuf/util/json_util.h>

#include <cstdarg>
#include <cstdio>

namespace snapd::snapctl {
namespace {

// Never throws: a string that is not UTF-8 prints with U+FFFD in its place.
std::string Dump(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace

Json ProtoJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &text, opts).ok()) {
    return Json::object();
  }
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? Json::object() : value;
}

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

std::string Table::Row(const std::vector<std::string>& cells) const {
  std::string line;
  for (size_t i = 0; i < columns_.size(); ++i) {
    const Column& c = columns_[i];
    const std::string& cell = i < cells.size() ? cells[i] : std::string();
    std::string pad(cell.size() < size_t(c.width) ? c.width - cell.size() : 0, ' ');
    if (i) line += ' ';
    if (c.left) {
      line += cell + pad;
    } else {
      line += pad + cell;
    }
  }
  line.erase(line.find_last_not_of(' ') + 1);
  return line + "\n";
}

std::string Table::Render() const {
  std::vector<std::string> header;
  for (const Column& c : columns_) header.push_back(c.header);
  std::string out = Row(header);
  for (const auto& row : rows_) out += Row(row);
  return out;
}

void Output::Text(std::string_view text) { std::fwrite(text.data(), 1, text.size(), stdout); }

void Output::Print(const Json& value) { Line(Dump(value, 2)); }

void Output::PrintLine(const Json& value) {
  Line(Dump(value, -1));
  Flush();
}

bool Output::Flush() { return std::fflush(stdout) == 0 && !std::ferror(stdout); }

void Error(std::string_view command, std::string_view message) {
  std::string line = "snapctl";
  if (!command.empty()) line.append(" ").append(command);
  line.append(": ").append(message).append("\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace snapd::snapctl
