#pragma once

// One-line Stream and Event calls for RPC tests: each builds the request,
// calls the raw stub with the session's metadata and returns the wire status
// (outputs through pointers, which may be null when not wanted).

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/rpc/grpc_status_matchers.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {

inline v1::StreamRef Ref(int device, uint64_t stream) {
  v1::StreamRef ref;
  ref.set_device(device);
  ref.set_stream(stream);
  return ref;
}

inline grpc::Status CreateStream(RawSession& session, int device, int priority,
                                 v1::CreateStreamResponse* out) {
  v1::CreateStreamRequest request;
  request.set_device(device);
  request.set_priority(priority);
  v1::CreateStreamResponse response;
  grpc::Status status = session.stream().Create(session.Context().get(), request, &response);
  if (out != nullptr) *out = response;
  return status;
}

// A new stream of priority 0 on `device`, or 0 (with a test failure).
inline uint64_t NewStream(RawSession& session, int device) {
  v1::CreateStreamResponse created;
  grpc::Status status = CreateStream(session, device, 0, &created);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return created.stream();
}

inline grpc::Status DestroyStream(RawSession& session, int device, uint64_t stream) {
  v1::DestroyStreamRequest request;
  *request.mutable_stream() = Ref(device, stream);
  v1::DestroyStreamResponse response;
  return session.stream().Destroy(session.Context().get(), request, &response);
}

inline grpc::Status QueryStream(RawSession& session, int device, uint64_t stream, bool* done) {
  v1::StreamRequest request;
  *request.mutable_stream() = Ref(device, stream);
  v1::QueryStreamResponse response;
  grpc::Status status = session.stream().Query(session.Context().get(), request, &response);
  if (done != nullptr) *done = response.done();
  return status;
}

inline grpc::Status SynchronizeStream(RawSession& session, int device, uint64_t stream) {
  v1::StreamRequest request;
  *request.mutable_stream() = Ref(device, stream);
  v1::SynchronizeStreamResponse response;
  return session.stream().Synchronize(session.Context().get(), request, &response);
}

inline grpc::Status WaitEvent(RawSession& session, int device, uint64_t stream, uint64_t event) {
  v1::WaitEventRequest request;
  *request.mutable_stream() = Ref(device, stream);
  request.set_event(event);
  v1::WaitEventResponse response;
  return session.stream().WaitEvent(session.Context().get(), request, &response);
}

inline grpc::Status WaitStream(RawSession& session, const v1::StreamRef& stream,
                               const v1::StreamRef& other) {
  v1::WaitStreamRequest request;
  *request.mutable_stream() = stream;
  *request.mutable_other() = other;
  v1::WaitStreamResponse response;
  return session.stream().WaitStream(session.Context().get(), request, &response);
}

struct EventKind {
  bool enable_timing = false;
  bool blocking = false;
  bool interprocess = false;
};

inline grpc::Status CreateEvent(RawSession& session, int device, EventKind kind, uint64_t* event) {
  v1::CreateEventRequest request;
  request.set_device(device);
  request.set_enable_timing(kind.enable_timing);
  request.set_blocking(kind.blocking);
  request.set_interprocess(kind.interprocess);
  v1::CreateEventResponse response;
  grpc::Status status = session.event().Create(session.Context().get(), request, &response);
  if (event != nullptr) *event = response.event();
  if (status.ok()) {
    EXPECT_EQ(response.device(), device);
  }
  return status;
}

// A new event of `kind` on `device`, or 0 (with a test failure).
inline uint64_t NewEvent(RawSession& session, int device, EventKind kind = {}) {
  uint64_t event = 0;
  grpc::Status status = CreateEvent(session, device, kind, &event);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return event;
}

inline grpc::Status DestroyEvent(RawSession& session, uint64_t event) {
  v1::EventRequest request;
  request.set_event(event);
  v1::DestroyEventResponse response;
  return session.event().Destroy(session.Context().get(), request, &response);
}

inline grpc::Status RecordEvent(RawSession& session, uint64_t event, int device, uint64_t stream) {
  v1::RecordEventRequest request;
  request.set_event(event);
  *request.mutable_stream() = Ref(device, stream);
  v1::RecordEventResponse response;
  return session.event().Record(session.Context().get(), request, &response);
}

inline grpc::Status QueryEvent(RawSession& session, uint64_t event, bool* done) {
  v1::EventRequest request;
  request.set_event(event);
  v1::QueryEventResponse response;
  grpc::Status status = session.event().Query(session.Context().get(), request, &response);
  if (done != nullptr) *done = response.done();
  return status;
}

inline grpc::Status SynchronizeEvent(RawSession& session, uint64_t event) {
  v1::EventRequest request;
  request.set_event(event);
  v1::SynchronizeEventResponse response;
  return session.event().Synchronize(session.Context().get(), request, &response);
}

inline grpc::Status ElapsedTime(RawSession& session, uint64_t start, uint64_t end, float* ms) {
  v1::ElapsedTimeRequest request;
  request.set_start(start);
  request.set_end(end);
  v1::ElapsedTimeResponse response;
  grpc::Status status = session.event().ElapsedTime(session.Context().get(), request, &response);
  if (ms != nullptr) *ms = response.milliseconds();
  return status;
}

inline grpc::Status GetIpcHandle(RawSession& session, uint64_t event, std::string* handle) {
  v1::EventRequest request;
  request.set_event(event);
  v1::GetIpcHandleResponse response;
  grpc::Status status = session.event().GetIpcHandle(session.Context().get(), request, &response);
  if (handle != nullptr) *handle = response.handle();
  return status;
}

inline grpc::Status OpenIpcHandle(RawSession& session, int device, const std::string& handle,
                                  uint64_t* event) {
  v1::OpenIpcHandleRequest request;
  request.set_device(device);
  request.set_handle(handle);
  v1::CreateEventResponse response;
  grpc::Status status = session.event().OpenIpcHandle(session.Context().get(), request, &response);
  if (event != nullptr) *event = response.event();
  return status;
}

// Whether the stream's queued work ran (the query itself must succeed).
inline bool StreamDone(RawSession& session, int device, uint64_t stream) {
  bool done = false;
  grpc::Status status = QueryStream(session, device, stream, &done);
  EXPECT_THAT(status, GrpcIsOk());
  return done;
}

// Whether the event completed (the query itself must succeed).
inline bool EventDone(RawSession& session, uint64_t event) {
  bool done = false;
  grpc::Status status = QueryEvent(session, event, &done);
  EXPECT_THAT(status, GrpcIsOk());
  return done;
}

}  // namespace gpumux::testing
