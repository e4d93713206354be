#include "proto/profile_records.h"

namespace gpumux {

void ToProto(const DeviceProfile& profile, v1::DeviceProfileRecords* out) {
  for (const DeviceWorkRecord& w : profile.work) {
    v1::DeviceWorkRecord* r = out->add_work();
    r->set_name(w.name);
    r->set_session_id(w.session);
    r->set_device(w.device);
    r->set_stream(w.stream);
    r->set_call_id(w.call_id);
    r->set_bytes(w.bytes);
    r->set_host_start_ns(w.host_start_ns);
    r->set_host_end_ns(w.host_end_ns);
    r->set_device_start_ns(w.device_start_ns);
    r->set_device_end_ns(w.device_end_ns);
  }
  for (const NvtxRangeRecord& range : profile.ranges) {
    v1::NvtxRangeRecord* r = out->add_ranges();
    r->set_message(range.message);
    r->set_session_id(range.session);
    r->set_depth(range.depth);
    r->set_start_ns(range.start_ns);
    r->set_end_ns(range.end_ns);
    r->set_thread(range.thread);
  }
  out->set_dropped_work(profile.dropped_work);
  out->set_dropped_ranges(profile.dropped_ranges);
}

DeviceProfile FromProto(const v1::DeviceProfileRecords& records) {
  DeviceProfile profile;
  for (const v1::DeviceWorkRecord& r : records.work()) {
    profile.work.push_back(DeviceWorkRecord{.name = r.name(),
                                            .session = r.session_id(),
                                            .device = r.device(),
                                            .stream = r.stream(),
                                            .call_id = r.call_id(),
                                            .bytes = r.bytes(),
                                            .host_start_ns = r.host_start_ns(),
                                            .host_end_ns = r.host_end_ns(),
                                            .device_start_ns = r.device_start_ns(),
                                            .device_end_ns = r.device_end_ns()});
  }
  for (const v1::NvtxRangeRecord& r : records.ranges()) {
    profile.ranges.push_back(NvtxRangeRecord{.message = r.message(),
                                             .session = r.session_id(),
                                             .depth = r.depth(),
                                             .start_ns = r.start_ns(),
                                             .end_ns = r.end_ns(),
                                             .thread = r.thread()});
  }
  profile.dropped_work = records.dropped_work();
  profile.dropped_ranges = records.dropped_ranges();
  return profile;
}

void ToProto(const HostProfile& profile, v1::HostProfileRecords* out) {
  for (const HostFunction& f : profile.functions) {
    v1::HostFunctionTotals* t = out->add_functions();
    t->set_name(f.name);
    t->set_calls(f.calls);
    t->set_self_ns(f.self_ns);
    t->set_total_ns(f.total_ns);
    t->set_waits(f.waits);
  }
  for (const HostCall& c : profile.calls) {
    v1::HostCallSpan* s = out->add_calls();
    s->set_call_id(c.call_id);
    s->set_function(c.function);
    s->set_thread(c.thread);
    s->set_depth(c.depth);
    s->set_start_ns(c.start_ns);
    s->set_end_ns(c.end_ns);
  }
  out->set_dropped_calls(profile.dropped_calls);
  out->set_threads(profile.threads);
  out->set_start_ns(profile.start_ns);
  out->set_end_ns(profile.end_ns);
  out->set_library_ns(profile.library_ns);
  out->set_waiting_ns(profile.waiting_ns);
}

HostProfile FromProto(const v1::HostProfileRecords& records) {
  HostProfile profile;
  for (const v1::HostFunctionTotals& t : records.functions()) {
    profile.functions.push_back(HostFunction{.name = t.name(),
                                             .calls = t.calls(),
                                             .self_ns = t.self_ns(),
                                             .total_ns = t.total_ns(),
                                             .waits = t.waits()});
  }
  profile.dropped_calls = records.dropped_calls();
  for (const v1::HostCallSpan& s : records.calls()) {
    if (s.function() >= profile.functions.size()) {
      ++profile.dropped_calls;
      continue;
    }
    profile.calls.push_back(HostCall{.call_id = s.call_id(),
                                     .function = s.function(),
                                     .thread = s.thread(),
                                     .depth = s.depth(),
                                     .start_ns = s.start_ns(),
                                     .end_ns = s.end_ns()});
  }
  profile.threads = records.threads();
  profile.start_ns = records.start_ns();
  profile.end_ns = records.end_ns();
  profile.library_ns = records.library_ns();
  profile.waiting_ns = records.waiting_ns();
  return profile;
}

SessionProfile FromProto(const v1::ProfileSessionResponse& response) {
  SessionProfile profile;
  profile.device = FromProto(response.device());
  if (response.has_host()) profile.host = FromProto(response.host());
  profile.host_missing = response.host_missing();
  profile.start_ns = response.start_ns();
  profile.end_ns = response.end_ns();
  return profile;
}

v1::ProfileSessionRequest ProfileSessionRequestOf(SessionId session, absl::Duration duration,
                                                  uint64_t capacity) {
  v1::ProfileSessionRequest request;
  request.set_session_id(session.value());
  request.set_duration_ms(absl::ToInt64Milliseconds(duration));
  request.set_capacity(capacity);
  return request;
}

}  // namespace gpumux
