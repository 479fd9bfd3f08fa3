// What every adjsnap command shares: the global options, the connection to adjsnapd, exit codes
// and the registration of the command groups (one .cc each) with the command line.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "output.h"
#include "adjsnap/status.h"
#include "adjsnap/units.h"  // ParseCount
#include "adjsnap/v1/control.grpc.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace adjsnap::cli {

// Exit codes, the same for every command: scripts (the Slurm prolog and epilog) test them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // adjsnapd said no, or could not be reached
inline constexpr int kExitUsage = 2;   // the command line was wrong

// Options before (or, for --json, also after) the command.
struct GlobalOptions {
  std::string socket;  // unix socket of the control plane
  std::string remote;  // HOST:PORT of an admin_listen; empty: the unix socket
  std::string tls_ca, tls_cert, tls_key;
  bool json = false;
};

// The connection one command uses, made after the command line parsed. Not thread-safe.
class Session {
 public:
  // kInvalidArgument when --remote lacks a readable PEM file. Connects lazily: the first RPC
  // finds out whether adjsnapd answers.
  static Result<std::unique_ptr<Session>> Open(const GlobalOptions& options);

  const GlobalOptions& options() const { return options_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::Control::Stub& stub() { return *stub_; }
  Output& out() { return out_; }

  // Says on stderr why RPC `what` failed (how to reach adjsnapd when it is not reachable);
  // returns kExitFailed.
  int Fail(const std::string& what, const grpc::Status& status) const;

 private:
  Session(const GlobalOptions& options, std::shared_ptr<grpc::Channel> channel);

  const GlobalOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Control::Stub> stub_;
  Output out_;
};

// A context with the deadline of a short RPC (everything but drain, dump and top's waits).
std::unique_ptr<grpc::ClientContext> ShortContext();

// "host", "disk", ... as tables show a tier.
std::string TierName(v1::Tier tier);
// A Stats tier entry's name: TierName, or "shared-disk" for the shared spools' entry.
std::string TierLabel(const v1::TierStats& t);
// The disk tier's spools as `status` and `spool probe` show them: one row each, with why a
// failed one failed.
void PrintSpools(Output& out, const google::protobuf::RepeatedPtrField<v1::SpoolState>& spools);
// "zfp-reversible", "zfp-rate", ... as `adjsnap::Codec` names them in messages.
std::string CodecLabel(v1::Codec codec);
// Error(), then kExitUsage: the command line gave `command` a bad value.
int UsageError(std::string_view command, std::string_view message);

// What the chosen subcommand runs once connected; set by the subcommand's parse callback.
using Action = std::function<int(Session&)>;

// Each adds its group's subcommands to `app`; the one the command line names sets `*action`.
void AddInspectCommands(CLI::App& app, Action* action);  // status, runs, ls, locate
void AddManageCommands(CLI::App& app, Action* action);   // rm, drain, spool, scrub, quota, purge
void AddDumpCommand(CLI::App& app, Action* action);
void AddPlanCommand(CLI::App& app, Action* action);
void AddTopCommand(CLI::App& app, Action* action);

}  // namespace adjsnap::cli
