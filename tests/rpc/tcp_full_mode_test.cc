// The full API over TCP (README "The full API over TCP (TLS)"): certificates
// made by the real openssl binary, the real Daemon in-process on a TCP port
// with TLS and a bearer token, the client library, the gpumux CLI and
// gpumuxd as child processes. Over TCP the client allocates through the
// daemon and copies inline; every call carries the token; without TLS, a
// token, or (with --tls-client-ca) a client certificate nothing gets in.

#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "client/client_testing.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/observer.h"
#include "gpumux/v1/admin.grpc.pb.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/group.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/daemon.h"
#include "tests/status_matchers.h"
#include "tests/support/raw_session.h"
#include "tests/support/shell_run.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "s3cr3t-T0ken_for.gpumux~tests";

using ::gpumux::testing::RunShell;
using ProcessRun = ::gpumux::testing::ShellRun;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// A CA, a server certificate for 127.0.0.1 and localhost, one for another
// name only, a client certificate from the CA and one from a second CA,
// and the token file, made once for the suite.
class Certificates {
 public:
  Certificates() {
    const std::string d = dir_.path();
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    for (const char* ca : {"ca", "other-ca"}) {
      Must(absl::StrCat("openssl req -x509 ", ec, " -days 2 -subj '/CN=gpumux test ", ca,
                        "' -addext basicConstraints=critical,CA:TRUE -addext "
                        "keyUsage=critical,keyCertSign,cRLSign -keyout ",
                        d, "/", ca, ".key -out ", d, "/", ca, ".crt"));
    }
    Issue("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth");
    Issue("named", "ca", "subjectAltName=DNS:gpumuxd.example\nextendedKeyUsage=serverAuth");
    Issue("client", "ca", "extendedKeyUsage=clientAuth");
    Issue("rogue", "other-ca", "extendedKeyUsage=clientAuth");
    WriteFile(Path("token"), std::string(kToken) + "\n");
    WriteFile(Path("wrong-token"), "not-the-token\n");
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  const std::string& dir() const { return dir_.path(); }

 private:
  void Must(const std::string& command) {
    ProcessRun run = RunShell(command);
    ASSERT_EQ(run.exit_code, 0) << command << "\n" << run.output;
  }
  // <name>.key and <name>.crt signed by `ca` with the extensions `ext`.
  void Issue(const std::string& name, const std::string& ca, const std::string& ext) {
    const std::string d = dir_.path() + "/";
    WriteFile(d + name + ".ext", ext + "\n");
    Must(
        absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "
                     "'/CN=gpumux ",
                     name, "' -keyout ", d, name, ".key -out ", d, name, ".csr"));
    Must(absl::StrCat("openssl x509 -req -days 2 -in ", d, name, ".csr -CA ", d, ca, ".crt -CAkey ",
                      d, ca, ".key -CAcreateserial -extfile ", d, name, ".ext -out ", d, name,
                      ".crt"));
  }

  TempDir dir_;
};

const Certificates& Certs() {
  static const Certificates* certs = new Certificates();
  return *certs;
}

class TcpFullModeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Shutdown();
  }

  Daemon::Options BaseOptions() {
    Daemon::Options options;
    options.socket_path = dir_.path() + "/gpumux.sock";
    options.backend = "host";
    options.host_devices = 1;
    options.host_device_memory = uint64_t{64} << 20;
    options.listen_address = "127.0.0.1:0";
    return options;
  }
  Daemon::Options FullOptions() {
    Daemon::Options options = BaseOptions();
    options.tcp_mode = "full";
    options.tls_cert_file = Certs().Path("server.crt");
    options.tls_key_file = Certs().Path("server.key");
    options.auth_token_file = Certs().Path("token");
    return options;
  }
  void Start(const Daemon::Options& options) {
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    ASSERT_GT(daemon_->tcp_port(), 0);
  }

  std::string Address() const { return absl::StrCat("127.0.0.1:", daemon_->tcp_port()); }
  static ChannelSecurity Security() {
    return ChannelSecurity{.tls_ca_file = Certs().Path("ca.crt"),
                           .auth_token_file = Certs().Path("token")};
  }
  // TLS verified against the CA, no call credentials: each call's metadata
  // is the test's own.
  std::shared_ptr<grpc::Channel> TlsChannel(const std::string& client = "") {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadAll(Certs().Path("ca.crt"));
    if (!client.empty()) {
      ssl.pem_cert_chain = ReadAll(Certs().Path(client + ".crt"));
      ssl.pem_private_key = ReadAll(Certs().Path(client + ".key"));
    }
    return grpc::CreateChannel(Address(), grpc::SslCredentials(ssl));
  }
  static std::unique_ptr<grpc::ClientContext> WithAuthorization(const std::string& value) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context->AddMetadata("authorization", value);
    return context;
  }
  static grpc::Status ListDevices(const std::shared_ptr<grpc::Channel>& channel,
                                  grpc::ClientContext* context) {
    v1::ListDevicesResponse response;
    return v1::Device::NewStub(channel)->ListDevices(context, v1::ListDevicesRequest(), &response);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// The whole path a remote training process takes: a session, memory through
// the daemon (local allocation falls back to it over TCP), bytes both ways
// inline, the books, the free.
TEST_F(TcpFullModeTest, ClientAllocatesCopiesReadsStatsAndFreesOverTls) {
  Start(FullOptions());
  for (AllocationMode mode : {AllocationMode::kLocal, AllocationMode::kDaemon}) {
    SCOPED_TRACE(mode == AllocationMode::kLocal ? "local" : "daemon");
    ClientOptions options;
    options.client_name = "tls-client";
    options.allocation = mode;
    options.security = Security();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Address(), options);
    ASSERT_OK(client.status());
    constexpr uint64_t kSize = 1 << 20;  // over max_inline_copy: would be staged on a Unix socket
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*(*client), kSize);
    ASSERT_OK(buffer.status());
    EXPECT_EQ(buffer->data(), nullptr);  // nothing is mapped over TCP
    std::vector<char> sent(kSize);
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7 + 3);
    ASSERT_OK(copy::HostToDevice(*(*client), *buffer, 0, sent.data(), kSize).status());
    std::vector<char> back(kSize, 0);
    ASSERT_OK(copy::DeviceToHost(*(*client), back.data(), *buffer, 0, kSize).status());
    EXPECT_EQ(back, sent);
    EXPECT_EQ(gpumux::StagingBufferSizeForTest(*(*client)), 0u);

    absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(*(*client));
    ASSERT_OK(stats.status());
    EXPECT_EQ(stats->at("allocated_bytes.all.current"), static_cast<int64_t>(kSize));
    // The daemon holds the books (no local allocator over TCP).
    absl::StatusOr<std::map<std::string, int64_t>> daemon_stats =
        Observer(Address(), Security()).MemoryStats(DeviceIndex(0));
    ASSERT_OK(daemon_stats.status());
    EXPECT_EQ(daemon_stats->at("allocated_bytes.all.current"), static_cast<int64_t>(kSize));
    absl::StatusOr<std::vector<SessionInfo>> sessions =
        Observer(Address(), Security()).ListSessions();
    ASSERT_OK(sessions.status());
    bool listed = false;
    for (const SessionInfo& session : *sessions) {
      if (session.session_id != (*client)->session_id()) continue;
      listed = true;
      EXPECT_EQ(session.client_name, "tls-client");
    }
    EXPECT_TRUE(listed);

    ASSERT_OK(memory::Free(*(*client), *std::move(buffer)));
    stats = memory::MemoryStats(*(*client));
    ASSERT_OK(stats.status());
    EXPECT_EQ(stats->at("allocated_bytes.all.current"), 0);
  }
}

TEST_F(TcpFullModeTest, StagedCopiesAreRefusedOverTcp) {
  Start(FullOptions());
  ClientOptions options;
  options.security = Security();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Address(), options);
  ASSERT_OK(client.status());
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*(*client), 4096);
  ASSERT_OK(buffer.status());
  char bytes[4096] = {};
  EXPECT_THAT(copy::HostToDevice(*(*client), *buffer, 0, bytes, sizeof(bytes),
                                 CopyOptions{.path = TransferPath::kStaging})
                  .status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("copies go inline")));
}

TEST_F(TcpFullModeTest, AWrongOrMissingTokenIsUnauthenticated) {
  Start(FullOptions());
  ChannelSecurity wrong = Security();
  wrong.auth_token_file = Certs().Path("wrong-token");
  ClientOptions options;
  options.security = wrong;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Address(), options);
  EXPECT_THAT(client.status(),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("the bearer token is wrong"),
                             Not(HasSubstr("not-the-token")), Not(HasSubstr(kToken)))));
  EXPECT_THAT(Observer(Address(), wrong).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("wrong")));

  ChannelSecurity none{.tls_ca_file = Certs().Path("ca.crt")};
  EXPECT_THAT(Observer(Address(), none).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("the call carries no 'authorization' metadata")));
  options.security = none;
  EXPECT_THAT(Client::Connect(Address(), options).status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("no 'authorization'")));
  EXPECT_OK(Observer(Address(), Security()).ListDevices().status());
}

// Malformed authorization metadata, each refused before any service sees it.
TEST_F(TcpFullModeTest, MalformedAuthorizationIsUnauthenticatedSayingWhat) {
  Start(FullOptions());
  auto channel = TlsChannel();
  for (const auto& [value, says] : std::vector<std::pair<std::string, std::string>>{
           {"Bearer", "empty bearer token"},
           {"Bearer ", "empty bearer token"},
           {"Basic x", "not of the form 'Bearer <token>'"},
           {std::string(kToken), "not of the form"},
           {absl::StrCat("Bearer", kToken), "not of the form"},
           {absl::StrCat("Bearer ", kToken, "x"), "wrong"},
           {absl::StrCat("Bearer ", std::string(kToken).substr(1)), "wrong"},
           {absl::StrCat("Bearer ", std::string(4000, 'a')), "wrong"},
       }) {
    auto context = WithAuthorization(value);
    grpc::Status status = ListDevices(channel, context.get());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << value.substr(0, 40);
    EXPECT_THAT(status.error_message(), HasSubstr(says)) << value.substr(0, 40);
    EXPECT_THAT(status.error_message(), Not(HasSubstr(kToken)));
  }
  // The scheme is case-insensitive, as HTTP's are.
  auto lower = WithAuthorization(absl::StrCat("bearer ", kToken));
  EXPECT_TRUE(ListDevices(channel, lower.get()).ok());
  // Two entries, even if one is right.
  auto twice = WithAuthorization(absl::StrCat("Bearer ", kToken));
  twice->AddMetadata("authorization", "Bearer other");
  grpc::Status status = ListDevices(channel, twice.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("more than one"));
  // Past gRPC's metadata limit the call never reaches the check, and fails
  // all the same (on a channel of its own: the server may drop the
  // connection).
  auto huge = WithAuthorization(absl::StrCat("Bearer ", std::string(64 << 10, 'a')));
  EXPECT_FALSE(ListDevices(TlsChannel(), huge.get()).ok());
  // The daemon still serves the right token after all that.
  auto right = WithAuthorization(absl::StrCat("Bearer ", kToken));
  grpc::Status served = ListDevices(TlsChannel(), right.get());
  EXPECT_TRUE(served.ok()) << served.error_code() << ": " << served.error_message();
}

// The check runs in the server's auth filter: no method passes without the
// token, unknown ones and reflection included; only Health/Check is exempt.
TEST_F(TcpFullModeTest, NoMethodBypassesTheTokenButHealthCheck) {
  Start(FullOptions());
  auto channel = TlsChannel();
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("gpumux.v1.Memory");
  grpc::health::v1::HealthCheckResponse response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    grpc::ClientContext context;
    auto watch = health->Watch(&context, request);
    EXPECT_FALSE(watch->Read(&response));
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::GenericStub generic(channel);
  for (const char* method : {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                             "/gpumux.v1.NoSuch/Method", "/gpumux.v1.Admin/ListTenants"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice nothing("");  // a ByteBuffer without a slice is no message at all
    grpc::ByteBuffer request_bytes(&nothing, 1);
    grpc::ByteBuffer reply;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request_bytes, &reply,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = std::move(s);
                        done = true;
                        done_cv.notify_all();
                      });
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
  }
}

TEST_F(TcpFullModeTest, HealthKnowsEveryServedServiceAndAdminIsRefused) {
  Start(FullOptions());
  auto channel = TlsChannel();
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service :
       {"gpumux.v1.Session", "gpumux.v1.Device", "gpumux.v1.Memory", "gpumux.v1.Observe",
        "gpumux.v1.Stream", "gpumux.v1.Event", "gpumux.v1.Copy", "gpumux.v1.Random",
        "gpumux.v1.Nvtx", "gpumux.v1.Comm", "gpumux.v1.Group", "gpumux.v1.Rendezvous"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("gpumux.v1.Admin");
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext check;
  EXPECT_EQ(health->Check(&check, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);

  auto context = WithAuthorization(absl::StrCat("Bearer ", kToken));
  v1::ListTenantsResponse tenants;
  grpc::Status status =
      v1::Admin::NewStub(channel)->ListTenants(context.get(), v1::ListTenantsRequest(), &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("gpumux.v1.Admin is not served over TCP"));
}

// gpumux.v1.Rendezvous, which the other daemons of a group call on rank 0's
// TCP listener: every bad input gets its code and a message naming it, and
// the store serves on.
TEST_F(TcpFullModeTest, TheRendezvousRefusesBadInputsPreciselyAndServesOn) {
  Start(FullOptions());
  auto channel = TlsChannel();
  auto rendezvous = v1::Rendezvous::NewStub(channel);
  const std::string bearer = absl::StrCat("Bearer ", kToken);
  auto join = [&](const std::string& group, int world_size, int rank, int64_t timeout_ms,
                  const std::string& address = "127.0.0.1:1",
                  v1::RendezvousJoinResponse* out = nullptr) {
    v1::RendezvousJoinRequest request;
    request.set_group(group);
    request.set_world_size(world_size);
    request.set_rank(rank);
    request.set_address(address);
    request.set_timeout_ms(timeout_ms);
    v1::RendezvousJoinResponse response;
    auto context = WithAuthorization(bearer);
    grpc::Status status = rendezvous->Join(context.get(), request, &response);
    if (out != nullptr) *out = response;
    return status;
  };
  auto set = [&](const std::string& group, uint64_t generation, const std::string& key,
                 const std::string& value) {
    v1::RendezvousSetRequest request;
    request.set_group(group);
    request.set_generation(generation);
    request.set_key(key);
    request.set_value(value);
    v1::RendezvousSetResponse response;
    auto context = WithAuthorization(bearer);
    return rendezvous->Set(context.get(), request, &response);
  };
  auto get = [&](const std::string& group, uint64_t generation, const std::string& key,
                 int64_t timeout_ms, std::string* value = nullptr) {
    v1::RendezvousGetRequest request;
    request.set_group(group);
    request.set_generation(generation);
    request.set_key(key);
    request.set_timeout_ms(timeout_ms);
    v1::RendezvousGetResponse response;
    auto context = WithAuthorization(bearer);
    grpc::Status status = rendezvous->Get(context.get(), request, &response);
    if (value != nullptr) *value = response.value();
    return status;
  };
  auto is = [](const grpc::Status& status, grpc::StatusCode code, const std::string& words) {
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(words));
  };
  using grpc::StatusCode;

  is(join("", 1, 0, 100), StatusCode::INVALID_ARGUMENT, "a group name has 1 to 128 characters");
  is(join(std::string(129, 'g'), 1, 0, 100), StatusCode::INVALID_ARGUMENT, "not 129");
  is(join("bad name", 1, 0, 100), StatusCode::INVALID_ARGUMENT, "may hold only [A-Za-z0-9._-]");
  is(join("g", 0, 0, 100), StatusCode::INVALID_ARGUMENT, "world size is 1 to 1024, not 0");
  is(join("g", 1025, 0, 100), StatusCode::INVALID_ARGUMENT, "not 1025");
  is(join("g", 2, 2, 100), StatusCode::INVALID_ARGUMENT, "rank 2 is out of range for world size 2");
  is(join("g", 2, -1, 100), StatusCode::INVALID_ARGUMENT, "rank -1 is out of range");
  is(join("g", 1, 0, -1), StatusCode::INVALID_ARGUMENT, "a group timeout is 0");
  is(join("g", 1, 0, int64_t{3600} * 1000 + 1), StatusCode::INVALID_ARGUMENT, "not 3600001 ms");
  is(join("g", 1, 0, 100, std::string(257, 'a')), StatusCode::INVALID_ARGUMENT,
     "a member address has at most 256 bytes, not 257");
  is(join("g", 2, 0, 100), StatusCode::DEADLINE_EXCEEDED, "1 of 2 ranks joined");
  is(get("never", 1, "k", 100), StatusCode::FAILED_PRECONDITION,
     "group \"never\" has no completed round");
  is(set("never", 1, "k", "v"), StatusCode::FAILED_PRECONDITION, "has no completed round");

  // A round forming with one world size refuses a join with another.
  // Whichever of the two joins first makes the round's world size: rank 0
  // joins again until its world-2 round is the one that refuses rank 1's.
  grpc::Status first;
  std::atomic<bool> first_done{false};
  std::thread waiting;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  grpc::Status other;
  do {
    if (!waiting.joinable()) {
      first_done = false;
      waiting = std::thread([&] {
        first = join("pair", 2, 0, 10000, "127.0.0.1:10");
        first_done = true;
      });
    }
    other = join("pair", 3, 1, 100, "127.0.0.1:11");
    if (other.error_code() == StatusCode::FAILED_PRECONDITION) break;
    if (first_done) waiting.join();  // it met rank 1's world-3 round first
    absl::SleepFor(absl::Milliseconds(10));
  } while (absl::Now() < deadline);
  is(other, StatusCode::FAILED_PRECONDITION,
     "group \"pair\" is forming with world size 2, not 3 (ranks 0 joined)");
  v1::RendezvousJoinResponse round;
  ASSERT_TRUE(join("pair", 2, 1, 10000, "127.0.0.1:11", &round).ok());
  waiting.join();
  ASSERT_TRUE(first.ok()) << first.error_message();
  ASSERT_EQ(round.members_size(), 2);
  EXPECT_EQ(round.members(0).address(), "127.0.0.1:10");
  const uint64_t generation = round.generation();

  is(set("pair", generation, "", "v"), StatusCode::INVALID_ARGUMENT,
     "a rendezvous key has 1 to 256 bytes, not 0");
  is(set("pair", generation, std::string(257, 'k'), "v"), StatusCode::INVALID_ARGUMENT, "not 257");
  is(set("pair", generation, "k", std::string((size_t{1} << 20) + 1, 'v')),
     StatusCode::INVALID_ARGUMENT, "a rendezvous value has at most 1048576 bytes, not 1048577");
  is(set("pair", generation + 1, "k", "v"), StatusCode::FAILED_PRECONDITION,
     absl::StrCat("round ", generation + 1, " of group \"pair\" is not current"));
  is(get("pair", generation, "absent", 50), StatusCode::DEADLINE_EXCEEDED,
     "key \"absent\" was not set within 50ms");
  is(get("pair", generation, "k", -5), StatusCode::INVALID_ARGUMENT, "a group timeout is 0");
  // A round's keys are bounded: 4 * 2 + 16 for a world of 2.
  for (int k = 0; k < 24; ++k) ASSERT_TRUE(set("pair", generation, absl::StrCat("k", k), "v").ok());
  is(set("pair", generation, "one-too-many", "v"), StatusCode::RESOURCE_EXHAUSTED,
     "holds 24 keys, its limit for world size 2");
  // Replacing a key is not a new one; a binary value comes back as it went.
  const std::string binary("\0\xff\n", 3);
  ASSERT_TRUE(set("pair", generation, "k0", binary).ok());
  std::string value;
  ASSERT_TRUE(get("pair", generation, "k0", 1000, &value).ok());
  EXPECT_EQ(value, binary);
  // And the daemon serves on.
  auto right = WithAuthorization(bearer);
  EXPECT_TRUE(ListDevices(channel, right.get()).ok());
}

TEST_F(TcpFullModeTest, APlaintextClientCannotConnect) {
  Start(FullOptions());
  auto channel = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  auto context = WithAuthorization(absl::StrCat("Bearer ", kToken));
  EXPECT_EQ(ListDevices(channel, context.get()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The library without a CA speaks plaintext: refused the same way.
  // The listener hangs up in the handshake; the message says what to check.
  EXPECT_THAT(Observer(Address(), ChannelSecurity()).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("give the CA of its certificate (--tls-ca, GPUMUX_TLS_CA)")));
}

TEST_F(TcpFullModeTest, WithAClientCaOnlyItsCertificatesGetIn) {
  Daemon::Options options = FullOptions();
  options.tls_client_ca_file = Certs().Path("ca.crt");
  Start(options);
  for (const char* client : {"", "rogue"}) {
    auto context = WithAuthorization(absl::StrCat("Bearer ", kToken));
    EXPECT_EQ(ListDevices(TlsChannel(client), context.get()).error_code(),
              grpc::StatusCode::UNAVAILABLE)
        << (*client == '\0' ? "no certificate" : client);
  }
  EXPECT_THAT(Observer(Address(), Security()).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("for a daemon with --tls-client-ca give this client's "
                                       "certificate (--tls-cert, --tls-key)"),
                             Not(HasSubstr("is gpumuxd running?")))));
  ChannelSecurity mutual = Security();
  mutual.tls_cert_file = Certs().Path("client.crt");
  mutual.tls_key_file = Certs().Path("client.key");
  EXPECT_OK(Observer(Address(), mutual).ListDevices().status());
  ClientOptions client_options;
  client_options.security = mutual;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Address(), client_options);
  ASSERT_OK(client.status());
  EXPECT_OK(memory::Allocate(*(*client), 4096).status());
  // The token is still required with a certificate.
  mutual.auth_token_file.clear();
  EXPECT_THAT(Observer(Address(), mutual).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(TcpFullModeTest, TheServerNameOverrideMatchesACertificateForAnotherName) {
  Daemon::Options options = FullOptions();
  options.tls_cert_file = Certs().Path("named.crt");
  options.tls_key_file = Certs().Path("named.key");
  Start(options);
  EXPECT_THAT(Observer(Address(), Security()).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--tls-server-name")));
  ChannelSecurity named = Security();
  named.tls_server_name = "gpumuxd.example";
  EXPECT_OK(Observer(Address(), named).ListDevices().status());
}

TEST_F(TcpFullModeTest, ObserveModeWithTlsAndTokenStillRefusesMutatingCalls) {
  Daemon::Options options = FullOptions();
  options.tcp_mode = "observe";
  Start(options);
  EXPECT_OK(Observer(Address(), Security()).ListDevices().status());
  EXPECT_THAT(Observer(Address(), ChannelSecurity{.tls_ca_file = Certs().Path("ca.crt")})
                  .ListDevices()
                  .status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  auto context = WithAuthorization(absl::StrCat("Bearer ", kToken));
  v1::AllocateRequest request;
  request.set_size(512);
  v1::AllocateResponse response;
  grpc::Status status =
      v1::Memory::NewStub(TlsChannel())->Allocate(context.get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("is not served on the TCP listener"));
  ClientOptions client_options;
  client_options.security = Security();
  EXPECT_THAT(Client::Connect(Address(), client_options).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(TcpFullModeTest, ObserveModeWithTlsAndNoTokenServesObservers) {
  Daemon::Options options = BaseOptions();
  options.tls_cert_file = Certs().Path("server.crt");
  options.tls_key_file = Certs().Path("server.key");
  Start(options);
  EXPECT_OK(Observer(Address(), ChannelSecurity{.tls_ca_file = Certs().Path("ca.crt")})
                .ListDevices()
                .status());
  EXPECT_THAT(Observer(Address(), ChannelSecurity()).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(TcpFullModeTest, StartIsRefusedNamingTheMissingFlagOrTheBadFile) {
  const std::string empty = Certs().Path("empty-token");
  WriteFile(empty, "\n");
  const std::string spaced = Certs().Path("spaced-token");
  WriteFile(spaced, "two words\n");
  const std::string garbage = Certs().Path("garbage.pem");
  WriteFile(garbage, "not a certificate\n");
  struct Case {
    const char* name;
    void (*change)(Daemon::Options&, const std::string&, const std::string&, const std::string&);
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"full without TLS",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tls_cert_file.clear();
         o.tls_key_file.clear();
       },
       {"--tcp-mode=full needs TLS", "--tls-cert"}},
      {"full without a token",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.auth_token_file.clear();
       },
       {"--tcp-mode=full needs --auth-token-file"}},
      {"an unknown mode",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tcp_mode = "everything";
       },
       {"--tcp-mode 'everything'"}},
      {"a token without TLS",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tcp_mode = "observe";
         o.tls_cert_file.clear();
         o.tls_key_file.clear();
       },
       {"--auth-token-file needs --tls-cert and --tls-key"}},
      {"a certificate without its key",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tls_key_file.clear();
       },
       {"--tls-cert needs --tls-key"}},
      {"a client CA without TLS",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tcp_mode = "observe";
         o.tls_cert_file.clear();
         o.tls_key_file.clear();
         o.auth_token_file.clear();
         o.tls_client_ca_file = Certs().Path("ca.crt");
       },
       {"--tls-client-ca needs --tls-cert and --tls-key"}},
      {"TCP flags without --listen",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.listen_address.clear();
       },
       {"give --listen too"}},
      {"an empty token",
       [](Daemon::Options& o, const std::string& e, const std::string&, const std::string&) {
         o.auth_token_file = e;
       },
       {"--auth-token-file '", "empty-token': the token is empty"}},
      {"a token with a space",
       [](Daemon::Options& o, const std::string&, const std::string& s, const std::string&) {
         o.auth_token_file = s;
       },
       {"spaced-token': byte 3 of the token is white space"}},
      {"a token over 4096 bytes",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         const std::string huge = Certs().Path("huge-token");
         WriteFile(huge, std::string(5000, 't') + "\n");
         o.auth_token_file = huge;
       },
       {"huge-token': the token is 5000 bytes long; at most 4096 are allowed"}},
      {"a missing token file",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.auth_token_file = Certs().Path("no-such-token");
       },
       {"no-such-token': No such file or directory"}},
      {"a garbage certificate",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string& g) {
         o.tls_cert_file = g;
       },
       {"--tls-cert '", "garbage.pem': holds no PEM certificate"}},
      {"a key that is not a key",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string& g) {
         o.tls_key_file = g;
       },
       {"--tls-key '", "garbage.pem': holds no unencrypted PEM private key"}},
      {"another certificate's key",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tls_key_file = Certs().Path("client.key");
       },
       {"client.key': the key does not belong to the certificate in --tls-cert"}},
      {"a garbage client CA",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string& g) {
         o.tls_client_ca_file = g;
       },
       {"--tls-client-ca '", "holds no PEM certificate"}},
      {"an unreadable key",
       [](Daemon::Options& o, const std::string&, const std::string&, const std::string&) {
         o.tls_key_file = Certs().dir();  // a directory
       },
       {"--tls-key '", "': not a regular file"}},
  };
  for (const Case& c : cases) {
    Daemon::Options options = FullOptions();
    c.change(options, empty, spaced, garbage);
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_EQ(daemon.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name << ": " << daemon.status();
    for (const std::string& part : c.says)
      EXPECT_THAT(daemon.status().message(), HasSubstr(part)) << c.name;
    EXPECT_THAT(daemon.status().message(), Not(HasSubstr(kToken))) << c.name;
  }
}

TEST_F(TcpFullModeTest, GpumuxdExits2SayingWhyWithoutTlsOrToken) {
  const std::string gpumuxd = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/server/gpumuxd");
  const std::string common = absl::StrCat(
      gpumuxd, " --backend=host --host-devices=1 --host-device-memory=64MiB --socket=", dir_.path(),
      "/gpumux.sock --listen=127.0.0.1:0 --tcp-mode=full");
  ProcessRun run = RunShell(absl::StrCat(common, " --auth-token-file=", Certs().Path("token")));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--tcp-mode=full needs TLS: give --tls-cert and --tls-key"));
  run = RunShell(absl::StrCat(common, " --tls-cert=", Certs().Path("server.crt"),
                              " --tls-key=", Certs().Path("server.key")));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--tcp-mode=full needs --auth-token-file"));
  run = RunShell(gpumuxd + " --help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* flag :
       {"--tcp-mode", "--tls-cert", "--tls-key", "--tls-client-ca", "--auth-token-file"}) {
    EXPECT_THAT(run.output, HasSubstr(absl::StrCat("  ", flag, "\n"))) << flag;
  }
}

TEST_F(TcpFullModeTest, TheCliWorksOverTlsWithFlagsOrEnvironment) {
  Start(FullOptions());
  ClientOptions options;
  options.client_name = "cli-peer";
  options.security = Security();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Address(), options);
  ASSERT_OK(client.status());
  const std::string gpumux = TestBinary(std::string(GPUMUX_BINARY_DIR) + "/client/cli/gpumux");
  ProcessRun run =
      RunShell(absl::StrCat(gpumux, " --address ", Address(), " --tls-ca ", Certs().Path("ca.crt"),
                            " --auth-token-file ", Certs().Path("token"), " sessions"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("cli-peer"));
  run = RunShell(absl::StrCat("GPUMUX_TLS_CA=", Certs().Path("ca.crt"),
                              " GPUMUX_AUTH_TOKEN_FILE=", Certs().Path("token"), " ", gpumux,
                              " --address=", Address(), " devices"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("host"));
  run = RunShell(absl::StrCat(gpumux, " --address ", Address(), " --tls-ca ",
                              Certs().Path("ca.crt"), " sessions"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("UNAUTHENTICATED"));
  run = RunShell(absl::StrCat(gpumux, " --address ", Address(), " --tls-ca ",
                              Certs().Path("no-such-ca.crt"), " --auth-token-file ",
                              Certs().Path("token"), " sessions"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("no-such-ca.crt': No such file or directory"));
}

TEST(ChannelSecurityTest, BadFilesAndTlsLessSecretsAreInvalidArgumentNamingThem) {
  const std::string address = "127.0.0.1:1";
  ChannelSecurity missing{.tls_ca_file = Certs().Path("missing-ca.crt")};
  EXPECT_THAT(Observer(address, missing).ListDevices().status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the TLS CA file (--tls-ca, GPUMUX_TLS_CA) '" +
                                 Certs().Path("missing-ca.crt") + "': No such file")));
  ChannelSecurity not_a_ca{.tls_ca_file = Certs().Path("token")};
  EXPECT_THAT(Observer(address, not_a_ca).ListDevices().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no PEM CERTIFICATE")));
  ChannelSecurity token_in_clear{.auth_token_file = Certs().Path("token")};
  EXPECT_THAT(Observer(address, token_in_clear).ListDevices().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
  ChannelSecurity half{.tls_ca_file = Certs().Path("ca.crt"),
                       .tls_cert_file = Certs().Path("client.crt")};
  EXPECT_THAT(Observer(address, half).ListDevices().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs the TLS client key")));
  const std::string empty = Certs().Path("client-empty-token");
  WriteFile(empty, "");
  ChannelSecurity empty_token{.tls_ca_file = Certs().Path("ca.crt"), .auth_token_file = empty};
  EXPECT_THAT(Observer(address, empty_token).ListDevices().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the token is empty")));
  ClientOptions options;
  options.security = missing;
  EXPECT_THAT(Client::Connect(address, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing-ca.crt")));
  // A Unix address ignores it all: the socket's permissions guard it.
  EXPECT_THAT(Observer("unix:///nonexistent/gpumux.sock", missing).ListDevices().status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(ChannelSecurityTest, EmptyFieldsTakeTheirEnvironmentVariables) {
  setenv("GPUMUX_TLS_CA", "/ca.pem", 1);
  setenv("GPUMUX_TLS_SERVER_NAME", "", 1);
  const ChannelSecurity resolved = ResolveChannelSecurity(ChannelSecurity{.tls_key_file = "/k"});
  unsetenv("GPUMUX_TLS_CA");
  unsetenv("GPUMUX_TLS_SERVER_NAME");
  EXPECT_EQ(resolved.tls_ca_file, "/ca.pem");
  EXPECT_EQ(resolved.tls_key_file, "/k");
  EXPECT_EQ(resolved.tls_server_name, "");
}

}  // namespace
}  // namespace gpumux::testing
