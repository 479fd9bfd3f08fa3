// Every adjsnap command's --json output, and the dump manifest, against the documented schema
// (docs/adjsnap-json.schema.json, described in docs/adjsnap-json.md), on a real daemon that
// holds snapshots on disk, in host memory and lost.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "daemon_process.h"
#include "adjsnap/client.h"
#include "temp_dir.h"

namespace adjsnap::testing {
namespace {

using Json = nlohmann::json;

// docs/adjsnap-json.md's examples, in order, each with the definition the line
// "<!-- schema: NAME -->" before it names (a block that does not parse is a discarded value).
std::vector<std::pair<std::string, Json>> DocExamples() {
  std::vector<std::pair<std::string, Json>> examples;
  std::ifstream doc(std::string(ADJSNAP_SOURCE_DIR) + "/docs/adjsnap-json.md");
  EXPECT_TRUE(doc.good());
  std::string line, def, block;
  bool in_block = false;
  while (std::getline(doc, line)) {
    const std::string marker = "<!-- schema: ";
    if (line.rfind(marker, 0) == 0) {
      def = line.substr(marker.size(), line.find(" -->") - marker.size());
    } else if (line == "```json" && !def.empty()) {
      in_block = true;
      block.clear();
    } else if (line == "```" && in_block) {
      in_block = false;
      examples.emplace_back(def, Json::parse(block, nullptr, /*allow_exceptions=*/false));
      def.clear();
    } else if (in_block) {
      block += line + "\n";
    }
  }
  return examples;
}

// "surface/reason" of each series in a `rejections` list, in order.
std::vector<std::string> RejectionSeries(const Json& rejections) {
  std::vector<std::string> series;
  for (const auto& r : rejections) {
    series.push_back(r.value("surface", "?") + "/" + r.value("reason", "?"));
  }
  return series;
}

// A JSON Schema checker for the keywords the schema uses: $ref (to #/$defs/NAME), type, enum,
// pattern, minimum, properties, required, additionalProperties (false), items, oneOf, and
// description. A schema with any other keyword is refused, so that the schema cannot rely on
// a rule this checker would silently skip.
class SchemaChecker {
 public:
  explicit SchemaChecker(Json root) : root_(std::move(root)) {}

  // "" when `doc` conforms to definition `def`; else what does not, with its JSON path.
  std::string Check(const Json& doc, const std::string& def) const {
    if (!root_.at("$defs").contains(def)) return "the schema has no definition '" + def + "'";
    return Validate(doc, root_.at("$defs").at(def), "$");
  }

 private:
  static bool HasType(const Json& v, const std::string& type) {
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer();
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    return false;
  }

  std::string Validate(const Json& v, const Json& s, const std::string& path) const {
    static const std::set<std::string> kKnown = {
        "$ref",    "type",       "enum",       "pattern",
        "minimum", "properties", "required",   "additionalProperties",
        "items",   "oneOf",      "description"};
    for (const auto& [key, unused] : s.items()) {
      if (!kKnown.count(key)) return path + ": schema keyword '" + key + "' is not checked";
    }
    if (s.contains("$ref")) {
      std::string ref = s.at("$ref");
      const std::string prefix = "#/$defs/";
      if (ref.rfind(prefix, 0) != 0) return path + ": unsupported $ref " + ref;
      return Validate(v, root_.at("$defs").at(ref.substr(prefix.size())), path);
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s.at("type").is_array()) {
        for (const auto& t : s.at("type")) ok = ok || HasType(v, t);
      } else {
        ok = HasType(v, s.at("type"));
      }
      if (!ok) return path + ": " + v.dump() + " is not of type " + s.at("type").dump();
    }
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s.at("enum")) found = found || e == v;
      if (!found) return path + ": " + v.dump() + " is not one of " + s.at("enum").dump();
    }
    if (s.contains("pattern") && v.is_string() &&
        !std::regex_search(v.get<std::string>(), std::regex(s.at("pattern").get<std::string>()))) {
      return path + ": " + v.dump() + " does not match " + s.at("pattern").dump();
    }
    if (s.contains("minimum") && v.is_number() && v.get<double>() < s.at("minimum").get<double>()) {
      return path + ": " + v.dump() + " is below " + s.at("minimum").dump();
    }
    if (s.contains("oneOf")) {
      int matches = 0;
      std::string why;
      for (const auto& option : s.at("oneOf")) {
        std::string e = Validate(v, option, path);
        matches += e.empty();
        why += "\n  " + e;
      }
      if (matches != 1) {
        return path + ": matches " + std::to_string(matches) + " of oneOf, not 1:" + why;
      }
    }
    if (v.is_object()) {
      for (const auto& r : s.value("required", Json::array())) {
        if (!v.contains(r.get<std::string>()))
          return path + ": lacks \"" + r.get<std::string>() + "\"";
      }
      const Json props = s.value("properties", Json::object());
      for (const auto& [key, value] : v.items()) {
        if (props.contains(key)) {
          if (std::string e = Validate(value, props.at(key), path + "." + key); !e.empty())
            return e;
        } else if (s.contains("additionalProperties") && !s.at("additionalProperties")) {
          return path + ": \"" + key + "\" is not in the schema";
        }
      }
    }
    if (v.is_array() && s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        std::string e = Validate(v[i], s.at("items"), path + "[" + std::to_string(i) + "]");
        if (!e.empty()) return e;
      }
    }
    return "";
  }

  const Json root_;
};

Json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in, nullptr, /*allow_exceptions=*/false);
}

class AdjsnapCliJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Json schema = ReadJsonFile(std::string(ADJSNAP_SOURCE_DIR) + "/docs/adjsnap-json.schema.json");
    ASSERT_TRUE(schema.is_object() && schema.contains("$defs")) << "unreadable schema";
    checker_ = std::make_unique<SchemaChecker>(std::move(schema));
    ASSERT_NO_FATAL_FAILURE(Start());
  }

  void Start() {
    auto d = DaemonProcess::Start({dir_.path(), "64M", {}, {}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
  }

  // A run of `steps` 64 KiB float32 steps, pushed and stored.
  // With a codec the steps are a constant field, which zfp shrinks whatever the codec.
  void Push(Client& c, const std::string& name, uint64_t steps, Codec codec = Codec::kNone) {
    RunSpec spec;
    spec.name = name;
    spec.steps = steps;
    spec.bytes_per_step = 64 << 10;
    spec.dtype = Dtype::kFloat32;
    spec.shape = {128, 128};
    spec.keep = true;
    spec.codec = codec;
    auto run = c.OpenRun(spec);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    std::vector<char> buf(spec.bytes_per_step);
    for (uint64_t t = 0; t < steps; ++t) {
      if (codec == Codec::kNone) {
        FillPattern(buf.data(), buf.size(), 7, t);
      } else {
        std::vector<float> field(buf.size() / sizeof(float), 1.5f + t);
        std::memcpy(buf.data(), field.data(), buf.size());
      }
      auto h = c.Push(run->run_id, t, buf.data(), buf.size());
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      ASSERT_TRUE(h->WaitStored().ok());
    }
  }

  // Runs adjsnap with --json; its stdout parsed, after checking its exit status.
  Json AdjsnapCli(std::vector<std::string> args, int want_exit = 0) {
    args.insert(args.begin(), {ADJSNAP_BINARY, "--socket", daemon_->socket(), "--json"});
    std::string out, err;
    int rc = RunProgram(args, &out, &err);
    EXPECT_EQ(rc, want_exit) << args[4] << ": " << err;
    Json j = Json::parse(out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << args[4] << " printed no JSON: " << out;
    return j;
  }

  void ExpectConforms(const Json& doc, const std::string& def) {
    checked_.insert(def);
    EXPECT_EQ(checker_->Check(doc, def), "") << def << ":\n" << doc.dump(2);
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<SchemaChecker> checker_;
  std::set<std::string> checked_;
};

TEST_F(AdjsnapCliJsonTest, EveryCommandPrintsWhatTheSchemaDocuments) {
  {
    auto c = ConnectClient(*daemon_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Push(**c, "on-disk", 3));
    ASSERT_NO_FATAL_FAILURE(Push(**c, "zfp-on-disk", 2, Codec::kZfpReversible));
    ExpectConforms(AdjsnapCli({"drain"}), "drain");
    ASSERT_NO_FATAL_FAILURE(Push(**c, "in-host", 2));
    ASSERT_NO_FATAL_FAILURE(Push(**c, "zfp-in-host", 2, Codec::kZfpReversible));
    // Compressed on demotion: the drained run's steps were, the one in host memory's never.
    Json runs = AdjsnapCli({"runs"});
    std::map<std::string, Json> compressed;
    for (const auto& r : runs.at("runs")) {
      compressed[r.at("spec").at("name")] = r.at("compressed_snapshots");
    }
    EXPECT_EQ(compressed["zfp-on-disk"], 2) << runs.dump(2);
    EXPECT_EQ(compressed["zfp-in-host"], 0) << runs.dump(2);
    std::string table, err;
    ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon_->socket(), "runs"}, &table, &err),
              0)
        << err;
    std::istringstream lines(table);
    std::map<std::string, std::string> row;
    for (std::string line; std::getline(lines, line);) row[line.substr(0, line.find(' '))] = line;
    EXPECT_NE(row["zfp-in-host"].find("codec zfp-reversible never applied"), std::string::npos)
        << table;
    EXPECT_EQ(row["zfp-on-disk"].find("never applied"), std::string::npos) << table;
  }
  // Host-tier snapshots do not survive kill -9: in-host's are lost, on-disk's are not.
  daemon_->Kill();
  ASSERT_NO_FATAL_FAILURE(Start());
  auto c = ConnectClient(*daemon_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_NO_FATAL_FAILURE(Push(**c, "fresh", 2));

  Json status = AdjsnapCli({"status"});
  ExpectConforms(status, "status");
  EXPECT_EQ(status.value("serving", ""), "serving");
  // The docs' status and top examples list every rejection series this daemon reports.
  for (const auto& [def, example] : DocExamples()) {
    if (def == "status" || def == "top") {
      EXPECT_EQ(RejectionSeries(example.value("rejections", Json::array())),
                RejectionSeries(status.at("rejections")))
          << "the " << def << " example in docs/adjsnap-json.md";
    }
  }

  Json runs = AdjsnapCli({"runs"});
  ExpectConforms(runs, "runs");
  std::map<std::string, Json> lost;
  for (const auto& r : runs.at("runs")) lost[r.at("spec").at("name")] = r.at("lost_snapshots");
  EXPECT_EQ(lost["in-host"], 2) << runs.dump(2);
  EXPECT_EQ(lost["on-disk"], 0) << runs.dump(2);
  for (const auto& r : runs.at("runs")) {
    std::string name = r.at("spec").at("name"), failure = r.at("failure");
    if (name == "in-host" || name == "zfp-in-host") {
      EXPECT_NE(failure.find("is lost: it was in host memory when adjsnapd last stopped"),
                std::string::npos)
          << name << ": " << failure;
    } else {
      EXPECT_EQ(failure, "") << name;
    }
  }

  Json ls = AdjsnapCli({"ls", "in-host"});
  ExpectConforms(ls, "ls");
  ASSERT_EQ(ls.at("snapshots").size(), 2u);
  EXPECT_EQ(ls.at("snapshots")[0].at("tier"), "lost");
  ls = AdjsnapCli({"ls", "on-disk"});
  ExpectConforms(ls, "ls");
  EXPECT_EQ(ls.at("snapshots")[0].at("tier"), "disk");
  EXPECT_EQ(ls.at("snapshots")[0].at("checksum_state"), "recorded");

  Json locate = AdjsnapCli({"locate", "fresh", "1"});
  ExpectConforms(locate, "locate");
  EXPECT_EQ(locate.at("snapshot").at("tier"), "host");

  // A checksum has one spelling: the table's, the manifest's and --json's agree.
  std::string table, err;
  ASSERT_EQ(
      RunProgram({ADJSNAP_BINARY, "--socket", daemon_->socket(), "ls", "on-disk"}, &table, &err),
      0);
  std::string sum = ls.at("snapshots")[0].at("checksum");
  EXPECT_NE(table.find(sum), std::string::npos) << sum << "\n" << table;

  std::string to = dir_.path() + "/dump";
  ExpectConforms(AdjsnapCli({"dump", "on-disk", "--to", to}), "dump");
  Json manifest = ReadJsonFile(to + "/manifest.json");
  ExpectConforms(manifest, "dump_manifest");
  EXPECT_EQ(manifest.at("steps")[0].at("checksum"), sum);
  std::string lost_to = dir_.path() + "/dump-lost";
  ExpectConforms(AdjsnapCli({"dump", "in-host", "--to", lost_to}, /*want_exit=*/1), "dump");
  ExpectConforms(ReadJsonFile(lost_to + "/manifest.json"), "dump_manifest");

  ExpectConforms(AdjsnapCli({"plan", "--steps", "200", "--bytes-per-step", "1M"}), "plan");
  Json zfp = AdjsnapCli({"plan", "--steps", "200", "--bytes-per-step", "1M", "--codec", "zfp-rate",
                      "--codec-param", "8", "--compute-time", "0.01"});
  ExpectConforms(zfp, "plan");
  EXPECT_EQ(zfp.value("compression_ratio", 0.0), 4.0) << zfp.dump(2);

  // top: one document per line; the first has no rates yet.
  std::string lines;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon_->socket(), "--json", "top", "--count",
                        "2", "--interval", "0.1"},
                       &lines, &err),
            0)
      << err;
  std::istringstream in(lines);
  int refreshes = 0;
  for (std::string line; std::getline(in, line); ++refreshes) {
    ExpectConforms(Json::parse(line, nullptr, false), "top");
  }
  EXPECT_EQ(refreshes, 2);

  ExpectConforms(AdjsnapCli({"spool", "probe"}), "spool");
  ExpectConforms(AdjsnapCli({"scrub", "on-disk"}), "scrub");
  ExpectConforms(AdjsnapCli({"quota"}), "quota");
  ExpectConforms(AdjsnapCli({"purge", "--job", "no-such-job"}), "purge");
  ExpectConforms(AdjsnapCli({"rm", "fresh"}), "rm");
  ExpectConforms(AdjsnapCli({"shutdown"}), "shutdown");
  EXPECT_TRUE(WaitUntil([&] { return !daemon_->Running(); }, std::chrono::seconds(30)));
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();

  // Every command adjsnap has was checked above (top and dump manifest count as theirs).
  std::string help;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--help"}, &help, &err), 0);
  ASSERT_NE(help.find("Subcommands:"), std::string::npos) << help;
  std::istringstream help_lines(help.substr(help.find("Subcommands:")));
  std::string line;
  std::getline(help_lines, line);
  while (std::getline(help_lines, line) && !line.empty() && line[0] == ' ') {
    std::string command = line.substr(line.find_first_not_of(' '));
    command = command.substr(0, command.find(' '));
    EXPECT_TRUE(checked_.count(command)) << "adjsnap " << command << " --json is not checked";
  }
  EXPECT_GE(checked_.size(), 11u);
}

// docs/adjsnap-json.md shows an example per definition, each after a line
// "<!-- schema: NAME -->"; every example conforms, and every definition a command uses has one.
TEST(AdjsnapCliJsonDocs, EachExampleConformsToItsDefinition) {
  SchemaChecker checker(
      ReadJsonFile(std::string(ADJSNAP_SOURCE_DIR) + "/docs/adjsnap-json.schema.json"));
  std::set<std::string> shown;
  for (const auto& [def, example] : DocExamples()) {
    EXPECT_EQ(checker.Check(example, def), "") << "the example of " << def;
    shown.insert(def);
  }
  for (const char* command : {"status", "runs", "ls", "locate", "rm", "drain", "shutdown",
                              "spool", "scrub",
                              "quota", "purge", "dump", "dump_manifest", "plan", "top"}) {
    EXPECT_TRUE(shown.count(command)) << "docs/adjsnap-json.md shows no example of " << command;
  }
}

}  // namespace
}  // namespace adjsnap::testing
