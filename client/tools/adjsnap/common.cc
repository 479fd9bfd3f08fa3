#include "common.h"

#include <tuple>
#include <utility>

#include "adjsnap/paths.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {

Session::Session(const GlobalOptions& options, std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::Control::NewStub(channel_)),
      out_(options.json) {}

Result<std::unique_ptr<Session>> Session::Open(const GlobalOptions& options) {
  std::shared_ptr<grpc::Channel> channel;
  if (options.remote.empty()) {
    channel = grpc::CreateChannel("unix:" + options.socket, grpc::InsecureChannelCredentials());
  } else {
    grpc::SslCredentialsOptions tls;
    for (auto [flag, path, pem] :
         {std::tuple{"--tls-ca", &options.tls_ca, &tls.pem_root_certs},
          std::tuple{"--tls-cert", &options.tls_cert, &tls.pem_cert_chain},
          std::tuple{"--tls-key", &options.tls_key, &tls.pem_private_key}}) {
      Result<std::string> text = path->empty() ? Status::NotFound("") : ReadTextFile(*path);
      if (!text.ok()) {
        return Status::InvalidArgument(std::string("--remote needs ") + flag +
                                       " FILE (a readable PEM file)" +
                                       (path->empty() ? "" : "; cannot read " + *path));
      }
      *pem = *std::move(text);
    }
    channel = grpc::CreateChannel(options.remote, grpc::SslCredentials(tls));
  }
  return std::unique_ptr<Session>(new Session(options, std::move(channel)));
}

int Session::Fail(const std::string& what, const grpc::Status& status) const {
  std::string msg = status.error_message();
  // UNAVAILABLE is also adjsnapd's own answer (a spool that cannot be reached, a stop in
  // progress): with the channel connected, its message says what it is.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    msg = options_.remote.empty()
              ? "adjsnapd is not reachable at " + options_.socket + " (" + msg +
                    "). Start it with `adjsnapd` (or `systemctl start adjsnap`), or pass --socket"
              : "adjsnapd is not reachable at " + options_.remote + " (" + msg +
                    "): check the address, that adjsnapd serves admin_listen there, and that its "
                    "admin_tls_ca signed your certificate";
  }
  Error(what, msg);
  return kExitFailed;
}

std::unique_ptr<grpc::ClientContext> ShortContext() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

int UsageError(std::string_view command, std::string_view message) {
  Error(command, message);
  return kExitUsage;
}

void PrintSpools(Output& out, const google::protobuf::RepeatedPtrField<v1::SpoolState>& spools) {
  Table t({{"SPOOL", 24, true},
           {"CLASS", 6, true},
           {"STATE", 7, true},
           {"USED", 12},
           {"BUDGET", 12},
           {"WHY", 0, true}});
  for (const v1::SpoolState& sp : spools) {
    std::string why;
    if (sp.state() == "failed") {
      why = sp.reason() + Format("; next probe in %.0f s", double(sp.next_probe_ms()) / 1000.0);
    } else if (sp.read_errors() > 0) {
      why = Counted(sp.read_errors(), "read error") + " (lost steps)";
    }
    t.Add({sp.dir().empty() ? "#" + std::to_string(sp.index()) : sp.dir(), sp.spool_class(),
           sp.state(), FormatBytes(sp.used_bytes()), FormatBytes(sp.budget_bytes()), why});
  }
  out.Print(t);
}

std::string TierLabel(const v1::TierStats& t) {
  return t.spool_class() == "shared" ? "shared-disk" : TierName(t.tier());
}

std::string TierName(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_DEVICE:
      return "device";
    case v1::TIER_HOST:
      return "host";
    case v1::TIER_DISK:
      return "disk";
    case v1::TIER_LOST:
      return "LOST";
    case v1::TIER_IN_FLIGHT:
      return "in-flight";
    default:
      return "-";
  }
}

std::string CodecLabel(v1::Codec codec) {
  // The JSON spelling of the enum value ("zfp-reversible"), so tables, --codec and JSON agree.
  const auto* value = v1::Codec_descriptor()->FindValueByNumber(codec);
  return value ? EnumJson(*value) : "?";
}

}  // namespace adjsnap::cli
