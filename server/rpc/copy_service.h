#pragma once

// gpumux.v1.Copy: a thin adapter from the wire to DeviceWork and the staging
// buffers; conversion lives in copy_proto.h. Calls that wait (wait=true,
// inline device-to-host, copies across devices: DeviceWork says which) run
// on the blocking executor, the rest on gRPC's threads.

#include "gpumux/v1/copy.grpc.pb.h"
#include "server/core/device_work.h"
#include "server/core/session_registry.h"
#include "server/core/staging_buffers.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class CopyService final : public v1::Copy::CallbackService {
 public:
  // All must outlive the service.
  CopyService(DeviceWork* work, StagingBuffers* staging, const SessionRegistry* sessions,
              BlockingExecutor* executor)
      : work_(work), staging_(staging), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* GetStagingBuffer(grpc::CallbackServerContext* context,
                                             const v1::GetStagingBufferRequest* request,
                                             v1::StagingBuffer* response) override;
  grpc::ServerUnaryReactor* DeviceToDevice(grpc::CallbackServerContext* context,
                                           const v1::DeviceToDeviceRequest* request,
                                           v1::CopyResponse* response) override;
  grpc::ServerUnaryReactor* HostToDevice(grpc::CallbackServerContext* context,
                                         const v1::HostToDeviceRequest* request,
                                         v1::CopyResponse* response) override;
  grpc::ServerUnaryReactor* DeviceToHost(grpc::CallbackServerContext* context,
                                         const v1::DeviceToHostRequest* request,
                                         v1::DeviceToHostResponse* response) override;
  grpc::ServerUnaryReactor* Memset(grpc::CallbackServerContext* context,
                                   const v1::MemsetRequest* request,
                                   v1::CopyResponse* response) override;

 private:
  DeviceWork* work_;
  StagingBuffers* staging_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
