// Requests whose bytes do not parse: gRPC's callback API would answer them
// UNIMPLEMENTED with no message; gpumuxd says INVALID_ARGUMENT and why, on
// unary methods and on the session stream, and keeps serving.

#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"

namespace gpumux::testing {
namespace {

class ParseFailureTest : public DaemonTest {
 protected:
  // Sends `messages` as raw bytes on `method` (each one message), half-closes
  // and returns the call's status.
  grpc::Status CallWithBytes(const std::string& method, const std::vector<std::string>& messages) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(&context, method, &cq);
    void* tag = nullptr;
    bool ok = false;
    int next_tag = 1;
    auto wait = [&] { return cq.Next(&tag, &ok) && ok; };
    call->StartCall(reinterpret_cast<void*>(next_tag++));
    EXPECT_TRUE(wait());
    for (const std::string& bytes : messages) {
      grpc::Slice slice(bytes.data(), bytes.size());
      grpc::ByteBuffer buffer(&slice, 1);
      call->Write(buffer, reinterpret_cast<void*>(next_tag++));
      if (!wait()) break;  // the server may already have answered
    }
    call->WritesDone(reinterpret_cast<void*>(next_tag++));
    cq.Next(&tag, &ok);
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(next_tag++));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }
};

TEST_F(ParseFailureTest, RandomBytesToAUnaryMethodAreInvalidArgument) {
  // Field 1 as a length-delimited field claiming 100 bytes that never come.
  const std::string garbage = "\x0a\x64\x01\x02\x03";
  for (const char* method : {"/gpumux.v1.Memory/Allocate", "/gpumux.v1.Device/GetDeviceCount",
                             "/gpumux.v1.Copy/HostToDevice", "/gpumux.v1.Session/Ping"}) {
    grpc::Status status = CallWithBytes(method, {garbage});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("could not be parsed"), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find(method), std::string::npos) << status.error_message();
  }
  RawSession still(channel_, "still-serving");
  EXPECT_TRUE(still.Ping().ok());
}

TEST_F(ParseFailureTest, AStringFieldThatIsNotUtf8IsInvalidArgument) {
  // ImportRequest{token: "\xff\xfe"}: proto3 strings must be UTF-8.
  grpc::Status status =
      CallWithBytes("/gpumux.v1.Memory/Import", {std::string("\x0a\x02\xff\xfe", 4)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("UTF-8"), std::string::npos) << status.error_message();
}

TEST_F(ParseFailureTest, GarbageOrNothingAsTheFirstSessionMessageIsInvalidArgument) {
  grpc::Status garbage = CallWithBytes("/gpumux.v1.Session/Open", {"\x0a\x64\x01"});
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << garbage.error_message();
  EXPECT_NE(garbage.error_message().find("`open`"), std::string::npos) << garbage.error_message();
  grpc::Status nothing = CallWithBytes("/gpumux.v1.Session/Open", {});
  EXPECT_EQ(nothing.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << nothing.error_message();
  RawSession still(channel_, "still-serving");
  EXPECT_TRUE(still.Ping().ok());
}

}  // namespace
}  // namespace gpumux::testing
