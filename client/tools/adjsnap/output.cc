#include "output.h"

#include <google/protobuf/descriptor.h>

#include <cctype>
#include <cstdarg>
#include <cstdio>

namespace adjsnap::cli {
namespace {

// Never throws: a string that is not UTF-8 prints with U+FFFD in its place.
std::string Dump(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// One value of `field` (element `index` of a repeated field, -1 for a singular one).
Json FieldValue(const Message& m, const FieldDescriptor& field, int index) {
  const Reflection& r = *m.GetReflection();
  const bool rep = index >= 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r.GetRepeatedInt32(m, &field, index) : r.GetInt32(m, &field);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r.GetRepeatedInt64(m, &field, index) : r.GetInt64(m, &field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r.GetRepeatedUInt32(m, &field, index) : r.GetUInt32(m, &field);
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = rep ? r.GetRepeatedUInt64(m, &field, index) : r.GetUInt64(m, &field);
      if (field.type() == FieldDescriptor::TYPE_FIXED64) return HexJson(v);
      return v;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r.GetRepeatedDouble(m, &field, index) : r.GetDouble(m, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r.GetRepeatedFloat(m, &field, index) : r.GetFloat(m, &field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r.GetRepeatedBool(m, &field, index) : r.GetBool(m, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumJson(rep ? *r.GetRepeatedEnum(m, &field, index) : *r.GetEnum(m, &field));
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = rep ? r.GetRepeatedString(m, &field, index) : r.GetString(m, &field);
      if (field.type() == FieldDescriptor::TYPE_BYTES) return v.size();  // a length, not bytes
      return v;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoJson(rep ? r.GetRepeatedMessage(m, &field, index) : r.GetMessage(m, &field));
  }
  return nullptr;
}

}  // namespace

Json ProtoJson(const Message& message) {
  Json out = Json::object();
  const google::protobuf::Descriptor& d = *message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& field = *d.field(i);
    if (field.is_repeated()) {
      Json list = Json::array();
      for (int k = 0; k < r.FieldSize(message, &field); ++k) {
        list.push_back(FieldValue(message, field, k));
      }
      out[field.name()] = std::move(list);
    } else {
      out[field.name()] = FieldValue(message, field, -1);
    }
  }
  return out;
}

std::string EnumJson(const google::protobuf::EnumValueDescriptor& value) {
  // The prefix is what every value of the enum starts with, up to an underscore: "TIER_".
  const google::protobuf::EnumDescriptor& e = *value.type();
  std::string prefix = e.value(0)->name();
  for (int i = 1; i < e.value_count(); ++i) {
    const std::string& name = e.value(i)->name();
    size_t n = 0;
    while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
    prefix.resize(n);
  }
  prefix.resize(prefix.rfind('_') == std::string::npos ? 0 : prefix.rfind('_') + 1);
  std::string out = value.name().substr(prefix.size());
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return out;
}

std::string HexJson(uint64_t value) { return Format("%016llx", (unsigned long long)value); }

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

std::string Counted(uint64_t n, std::string_view noun, std::string_view plural) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(noun);
  return plural.empty() ? out.append(noun).append("s") : out.append(plural);
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
  std::string line = "adjsnap";
  if (!command.empty()) line.append(" ").append(command);
  line.append(": ").append(message).append("\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace adjsnap::cli
