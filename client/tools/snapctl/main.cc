// snapctl: inspect and manage a running snapd over its gRPC control plane. Tables for people;
// --json for scripts. The command line is parsed here; each group of commands lives in its own
// file (inspect, manage, dump, plan, top) and prints through output.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "snapd/paths.h"

namespace snapd::snapctl {
namespace {

constexpr const char* kFooter =
    "The socket defaults to $SNAPD_SOCKET, else snapd's default socket. --remote reaches a\n"
    "snapd's admin_listen over mutual TLS (PEM files; $SNAPCTL_REMOTE, $SNAPCTL_TLS_CA,\n"
    "$SNAPCTL_TLS_CERT, $SNAPCTL_TLS_KEY likewise) as an admin. --json may also follow the\n"
    "command. Exit status: 0 done, 1 snapd failed or refused, 2 bad command line.\n"
    "`snapctl COMMAND --help` describes a command's arguments.";

constexpr const char* kCommandFooter =
    "Global options (--socket, --remote, --json, ...): `snapctl --help`.";

// "snapctl[ COMMAND]: WHAT" and how to get help, for an error CLI11 found.
std::string FailureMessage(const CLI::App* app, const CLI::Error& e) {
  std::string command;
  for (const CLI::App* sub = app; sub != nullptr;) {
    auto chosen = sub->get_subcommands();
    if (chosen.empty()) break;
    sub = chosen.front();
    command += " " + sub->get_name();
  }
  return "snapctl" + command + ": " + e.what() + "\nRun 'snapctl" + command +
         " --help' for more information.\n";
}

int Main(int argc, char** argv) {
  GlobalOptions o;
  o.socket = ClientSocketPath();
  CLI::App app("Inspect and manage a running snapd over its gRPC control plane.", "snapctl");
  app.fallthrough();  // the global options (--json above all) may also follow the command
  app.require_subcommand(1);
  app.footer(kFooter);
  app.failure_message(FailureMessage);
  app.set_version_flag("--version", "snapctl " SNAPD_VERSION, "print snapctl's version and exit");
  app.add_option("--socket", o.socket, "snapd's control socket")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--remote", o.remote, "a snapd's admin_listen, over mutual TLS")
      ->type_name("HOST:PORT")
      ->envname("SNAPCTL_REMOTE");
  app.add_option("--tls-ca", o.tls_ca, "PEM: the CA that signed snapd's certificate")
      ->type_name("CA")
      ->envname("SNAPCTL_TLS_CA");
  app.add_option("--tls-cert", o.tls_cert, "PEM: your certificate, for --remote")
      ->type_name("CERT")
      ->envname("SNAPCTL_TLS_CERT");
  app.add_option("--tls-key", o.tls_key, "PEM: your certificate's key, for --remote")
      ->type_name("KEY")
      ->envname("SNAPCTL_TLS_KEY");
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
      Error("", "unknown command '" + extra.front() + "'; `snapctl --help` lists them");
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
}  // namespace snapd::snapctl

int main(int argc, char** argv) {
  try {
    return snapd::snapctl::Main(argc, argv);
  } catch (const std::exception& e) {  // from CLI11 or nlohmann-json: a bug of snapctl's
    std::fprintf(stderr, "snapctl: internal error: %s\n", e.what());
    return 1;
  }
}
