// rm, drain, shutdown, spool probe, scrub, quota, purge: what changes adjsnapd's state.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>

#include "common.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {
namespace {

int Rm(Session& s, const std::string& name) {
  v1::DeleteRunRequest req;
  req.set_name(name);
  v1::DeleteRunResponse r;
  grpc::Status st = s.stub().DeleteRun(ShortContext().get(), req, &r);
  if (!st.ok()) return s.Fail("rm", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line("deleted run " + name + ", freed " + FormatBytes(r.freed_bytes()));
  }
  return kExitOk;
}

int Drain(Session& s) {
  grpc::ClientContext ctx;  // no deadline: it answers once everything is on disk
  v1::DrainResponse r;
  grpc::Status st = s.stub().Drain(&ctx, v1::DrainRequest(), &r);
  if (!st.ok()) return s.Fail("drain", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line(
        Format("moved %s (%s) to disk; the host tier holds no snapshot only it has",
               Counted(r.moved(), "snapshot").c_str(), FormatBytes(r.moved_bytes()).c_str()));
  }
  return kExitOk;
}

int Shutdown(Session& s) {
  v1::ShutdownResponse r;
  grpc::Status st = s.stub().Shutdown(ShortContext().get(), v1::ShutdownRequest(), &r);
  if (!st.ok()) return s.Fail("shutdown", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line("adjsnapd is stopping: pushes are refused, host memory goes to disk (or to "
                 "systemd's fd store), then it exits; its log says what was kept");
  }
  return kExitOk;
}

// The options of quota and purge as given; empty: not given.
struct UidArgs {
  std::string uid;
  std::string set;  // quota only
  std::string job;  // purge only
};

// Sets the uid of `req` from `--uid`, if given; false after saying why not.
template <typename Request>
bool ParseUid(const char* command, const std::string& text, Request* req) {
  if (text.empty()) return true;
  uint64_t uid = 0;
  if (!ParseCount(text, &uid) || uid > UINT32_MAX) {
    Error(command, "--uid must be a numeric uid, got '" + text + "'");
    return false;
  }
  req->set_uid(static_cast<uint32_t>(uid));
  return true;
}

int Quota(Session& s, const UidArgs& a) {
  v1::QuotaRequest req;
  if (!ParseUid("quota", a.uid, &req)) return kExitUsage;
  if (!a.set.empty()) {
    Result<uint64_t> bytes = ParseBytes(a.set);
    if (!bytes.ok())
      return UsageError("quota", "--set '" + a.set + "': " + bytes.status().message());
    req.set_set(true);
    req.set_quota_bytes(*bytes);
  }
  v1::QuotaResponse r;
  grpc::Status st = s.stub().Quota(ShortContext().get(), req, &r);
  if (!st.ok()) return s.Fail("quota", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line(Format("uid %u: quota %s, stored %s in %s", r.uid(),
                        r.quota_bytes() ? FormatBytes(r.quota_bytes()).c_str() : "none",
                        FormatBytes(r.stored_bytes()).c_str(), Counted(r.runs(), "run").c_str()));
  }
  return kExitOk;
}

int Purge(Session& s, const UidArgs& a) {
  v1::PurgeRunsRequest req;
  if (!ParseUid("purge", a.uid, &req)) return kExitUsage;
  req.set_job(a.job);
  v1::PurgeRunsResponse r;
  grpc::Status st = s.stub().PurgeRuns(ShortContext().get(), req, &r);
  if (!st.ok()) return s.Fail("purge", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line(Format("deleted %s, freed %s", Counted(r.runs(), "run").c_str(),
                        FormatBytes(r.freed_bytes()).c_str()));
  }
  return kExitOk;
}

int ProbeSpools(Session& s) {
  v1::ProbeSpoolsResponse r;
  grpc::ClientContext ctx;  // a probe of a hung device may take a while: no short deadline
  grpc::Status st = s.stub().ProbeSpools(&ctx, v1::ProbeSpoolsRequest(), &r);
  if (!st.ok()) return s.Fail("spool probe", st);
  int failed = 0;
  for (const auto& sp : r.spools()) failed += sp.state() == "failed";
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line(Format("%s came back; %d still failed", Counted(r.recovered(), "spool").c_str(),
                        failed));
    PrintSpools(s.out(), r.spools());
  }
  return failed ? kExitFailed : kExitOk;
}

int Scrub(Session& s, const std::string& name) {
  v1::ScrubRunRequest req;
  req.set_name(name);
  v1::ScrubRunResponse r;
  grpc::ClientContext ctx;  // reads every file of the run: no short deadline
  grpc::Status st = s.stub().ScrubRun(&ctx, req, &r);
  if (!st.ok()) return s.Fail("scrub", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
  } else {
    s.out().Line(Format("%s: %s verified, %d lost, %llu unreadable now", name.c_str(),
                        Counted(r.verified(), "spool file").c_str(), r.lost_size(),
                        (unsigned long long)r.unreadable()));
    for (const auto& l : r.lost()) {
      s.out().Line(Format("  step %llu LOST: %s", (unsigned long long)l.step(),
                          l.reason().c_str()));
    }
  }
  return r.lost_size() ? kExitFailed : kExitOk;
}

}  // namespace

void AddManageCommands(CLI::App& app, Action* action) {
  auto run = std::make_shared<std::string>();
  CLI::App* rm = app.add_subcommand("rm", "delete RUN and free its snapshots");
  rm->add_option("RUN", *run, "the run (an admin names another uid's run as UID:name)")
      ->type_name("")
      ->required();
  rm->callback([action, run] { *action = [run](Session& s) { return Rm(s, *run); }; });

  app.add_subcommand("drain", "move every host-tier snapshot to disk (before draining the node)")
      ->callback([action] { *action = Drain; });
  app.add_subcommand("shutdown",
                     "stop adjsnapd as SIGTERM does: host memory is kept or written to disk first")
      ->callback([action] { *action = Shutdown; });

  CLI::App* spool = app.add_subcommand("spool", "the disk tier's spools");
  spool->require_subcommand(1);
  spool
      ->add_subcommand("probe",
                       "probe every failed spool now; one that works is back in the rotation")
      ->callback([action] { *action = ProbeSpools; });

  auto scrub_run = std::make_shared<std::string>();
  CLI::App* scrub = app.add_subcommand(
      "scrub", "re-verify every spool file of RUN now; damaged ones are marked lost");
  scrub->footer("Exit status 1 when a step was found lost. Needs an admin.");
  scrub->add_option("RUN", *scrub_run, "the run (an admin names another uid's run as UID:name)")
      ->type_name("")
      ->required();
  scrub->callback(
      [action, scrub_run] { *action = [scrub_run](Session& s) { return Scrub(s, *scrub_run); }; });

  auto quota_args = std::make_shared<UidArgs>();
  CLI::App* quota =
      app.add_subcommand("quota", "a uid's byte quota and what it stores (default: yours)");
  quota->footer(
      "--set needs root, adjsnapd's uid or a member of admin_group; another uid's quota "
      "needs one too.");
  quota->add_option("--uid", quota_args->uid, "the uid (default: yours)")->type_name("U");
  quota->add_option("--set", quota_args->set, "set the quota: 500G, 1T, ... (0 = no limit)")
      ->type_name("BYTES");
  quota->callback([action, quota_args] {
    *action = [quota_args](Session& s) { return Quota(s, *quota_args); };
  });

  auto purge_args = std::make_shared<UidArgs>();
  CLI::App* purge = app.add_subcommand(
      "purge", "delete every run of a uid (default: yours), or only those of one batch job");
  purge->footer(
      "Another uid's runs need an admin. The Slurm epilog runs\n"
      "`adjsnap purge --uid U --job J` after every job.");
  purge->add_option("--uid", purge_args->uid, "the uid (default: yours)")->type_name("U");
  purge->add_option("--job", purge_args->job, "only the runs labelled with this batch job")
      ->type_name("J");
  purge->callback([action, purge_args] {
    *action = [purge_args](Session& s) { return Purge(s, *purge_args); };
  });
}

}  // namespace adjsnap::cli
