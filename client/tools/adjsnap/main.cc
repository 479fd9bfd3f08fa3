// adjsnap: inspect and manage a running adjsnapd over its gRPC control plane. Tables for people;
// --json for scripts. The command line is parsed here; each group of commands lives in its own
// file (inspect, manage, dump, plan, top) and prints through output.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "adjsnap/paths.h"

namespace adjsnap::cli {
namespace {

constexpr const char* kFooter =
    "The socket defaults to $ADJSNAP_SOCKET, else adjsnapd's default socket. --remote reaches a\n"
    "adjsnapd's admin_listen over mutual TLS (PEM files; $ADJSNAP_REMOTE, $ADJSNAP_TLS_CA,\n"
    "$ADJSNAP_TLS_CERT, $ADJSNAP_TLS_KEY likewise) as an admin. --json may also follow the\n"
    "command. Exit status: 0 done, 1 adjsnapd failed or refused, 2 bad command line.\n"
    "`adjsnap COMMAND --help` describes a command's arguments.";

constexpr const char* kCommandFooter =
    "Global options (--socket, --remote, --json, ...): `adjsnap --help`.";

// "adjsnap[ COMMAND]: WHAT" and how to get help, for an error CLI11 found.
std::string FailureMessage(const CLI::App* app, const CLI::Error& e) {
  std::string command;
  for (const CLI::App* sub = app; sub != nullptr;) {
    auto chosen = sub->get_subcommands();
    if (chosen.empty()) break;
    sub = chosen.front();
    command += " " + sub->get_name();
  }
  return "adjsnap" + command + ": " + e.what() + "\nRun 'adjsnap" + command +
         " --help' for more information.\n";
}

int Main(int argc, char** argv) {
  GlobalOptions o;
  o.socket = ClientSocketPath();
  CLI::App app("Inspect and manage a running adjsnapd over its gRPC control plane.", "adjsnap");
  app.fallthrough();  // the global options (--json above all) may also follow the command
  app.require_subcommand(1);
  app.footer(kFooter);
  app.failure_message(FailureMessage);
  app.set_version_flag("--version", "adjsnap " ADJSNAP_VERSION, "print adjsnap's version and exit");
  app.add_option("--socket", o.socket, "adjsnapd's control socket")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--remote", o.remote, "an adjsnapd's admin_listen, over mutual TLS")
      ->type_name("HOST:PORT")
      ->envname("ADJSNAP_REMOTE");
  app.add_option("--tls-ca", o.tls_ca, "PEM: the CA that signed adjsnapd's certificate")
      ->type_name("CA")
      ->envname("ADJSNAP_TLS_CA");
  app.add_option("--tls-cert", o.tls_cert, "PEM: your certificate, for --remote")
      ->type_name("CERT")
      ->envname("ADJSNAP_TLS_CERT");
  app.add_option("--tls-key", o.tls_key, "PEM: your certificate's key, for --remote")
      ->type_name("KEY")
      ->envname("ADJSNAP_TLS_KEY");
  app.add_flag("--json", o.json, "JSON for scripts instead of tables");

  Action action;
  AddInspectCommands(app, &action);
  AddManageCommands(app, &action);
  AddDumpCommand(app, &action);
  AddPlanCommand(app, &action);
  AddTopCommand(app, &action);
  for (CLI::App* sub : app.get_subcommands({})) {  // each inherited kFooter; say less there
    std::string own = sub->get_footer() == kFooter ? "" : sub->get_footer() + "\n";
    sub->footer(own + kCommandFooter);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A word where the command belongs: say so rather than that a command is missing.
    std::vector<std::string> extra = app.remaining();
    if (app.get_subcommands().empty() && !extra.empty() && !extra.front().empty() &&
        extra.front()[0] != '-') {
      Error("", "unknown command '" + extra.front() + "'; `adjsnap --help` lists them");
      return kExitUsage;
    }
    app.exit(e);
    return kExitUsage;
  }
  Result<std::unique_ptr<Session>> session = Session::Open(o);
  if (!session.ok()) {
    Error("", session.status().message());
    return kExitUsage;
  }
  return action(**session);
}

}  // namespace
}  // namespace adjsnap::cli

int main(int argc, char** argv) {
  try {
    return adjsnap::cli::Main(argc, argv);
  } catch (const std::exception& e) {  // from CLI11 or nlohmann-json: a bug of adjsnap's
    std::fprintf(stderr, "adjsnap: internal error: %s\n", e.what());
    return 1;
  }
}
