// adjsnap against a remote admin address: gRPC over mutual TLS with certificates made by the
// test (openssl): a client certificate the configured CA signed is an admin; others are
// refused at the handshake.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class RemoteAdminTest : public AdjsnapTest {
 protected:
  void SetUp() override {
    // A CA, a server certificate for localhost, an admin's client certificate from that CA and
    // one from a CA adjsnapd does not trust.
    const std::string script = R"(set -e
cd "$1"
key() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" \
          -subj "/CN=$2" "${@:3}" 2>/dev/null; }
key ca adjsnap-test-ca -x509 -days 1 -out ca.pem
key rogue-ca rogue-ca -x509 -days 1 -out rogue-ca.pem
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext
key server localhost -out server.csr
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile san.ext -out server.pem 2>/dev/null
key admin admin -out admin.csr
openssl x509 -req -in admin.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -out admin.pem 2>/dev/null
key rogue rogue -out rogue.csr
openssl x509 -req -in rogue.csr -CA rogue-ca.pem -CAkey rogue-ca.key -CAcreateserial -days 1 \
  -out rogue.pem 2>/dev/null
)";
    std::string out, err;
    ASSERT_EQ(RunProgram({"/bin/bash", "-c", script, "certs", dir()}, &out, &err), 0) << err;
    // Port 0: the kernel picks a free port, and adjsnapd's log names it.
    ASSERT_NO_FATAL_FAILURE(StartDaemon(
        Options("64M", {"--admin_listen", "localhost:0", "--admin_tls_cert", Path("server.pem"),
                        "--admin_tls_key", Path("server.key"), "--admin_tls_ca", Path("ca.pem")})));
    const std::string said = "remote administration over mutual TLS on localhost:";
    const std::string log = daemon().Log();
    const size_t at = log.find(said);
    ASSERT_NE(at, std::string::npos) << log;
    const int port = std::atoi(log.c_str() + at + said.size());
    ASSERT_GT(port, 0) << log;
    address_ = "localhost:" + std::to_string(port);
  }
  std::string Path(const std::string& name) const { return dir() + "/" + name; }
  // adjsnap --remote with the client certificate `who` (admin or rogue).
  int Remote(const std::string& who, std::vector<std::string> args, std::string* out,
             std::string* err) {
    std::vector<std::string> argv = {ADJSNAP_BINARY,     "--remote",     address_,
                                     "--tls-ca",         Path("ca.pem"), "--tls-cert",
                                     Path(who + ".pem"), "--tls-key",    Path(who + ".key")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, out, err);
  }

  std::string address_;
};

TEST_F(RemoteAdminTest, AnAdminCertificateSeesAndManagesEveryRun) {
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_NE(OpenRun(*c, Spec("local-run", 1, 64)).run_id, 0u);
  std::string out, err;
  ASSERT_EQ(Remote("admin", {"runs"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("local-run"), std::string::npos) << out;
  ASSERT_EQ(Remote("admin", {"quota", "--uid", "4242", "--set", "1G"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("uid 4242: quota 1.0 GiB"), std::string::npos) << out;
  // status names the address reached and the remote daemon's own socket on its node.
  ASSERT_EQ(Remote("admin", {"status"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("control   tls:" + address_), std::string::npos) << out;
  EXPECT_NE(out.find("(on its node: unix:" + daemon().socket() + ")"), std::string::npos) << out;
  ASSERT_EQ(Remote("admin", {"rm", "local-run"}, &out, &err), 0) << err;
  EXPECT_TRUE(c->ListRuns()->empty());
}

TEST_F(RemoteAdminTest, ACertificateFromAnotherCaIsRefused) {
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_NE(OpenRun(*c, Spec("private-run", 1, 64)).run_id, 0u);
  std::string out, err;
  EXPECT_NE(Remote("rogue", {"runs"}, &out, &err), 0);
  EXPECT_EQ(out.find("private-run"), std::string::npos) << out;
  EXPECT_NE(err.find("not reachable"), std::string::npos) << err;
  // The daemon keeps serving everyone else.
  ASSERT_EQ(Remote("admin", {"runs"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("private-run"), std::string::npos);
}

TEST_F(RemoteAdminTest, RemoteWithoutAKeySaysWhatIsMissing) {
  std::string out, err;
  EXPECT_EQ(RunProgram({ADJSNAP_BINARY, "--remote", address_, "--tls-ca", Path("ca.pem"),
                        "--tls-cert", Path("admin.pem"), "runs"},
                       &out, &err),
            2);
  EXPECT_NE(err.find("--tls-key"), std::string::npos) << err;
}

TEST(RemoteAdminConfig, AdminListenWithoutCertificatesIsRefusedAtStart) {
  std::string out, err;
  int rc =
      RunProgram({ADJSNAPD_BINARY, "--admin_listen", "127.0.0.1:7443", "--print-config"}, &out, &err);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("mutual TLS"), std::string::npos) << err;
}

}  // namespace
}  // namespace adjsnap::testing
