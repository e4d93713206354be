#include "client/profile_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gpumux/common/unique_fd.h"

namespace gpumux {

// Every field another process may read while this one writes is an atomic;
// relaxed accesses suffice for the counters (each is read on its own), and
// a span is published by its `seq` (release) after its fields, checked again
// after reading them (a seqlock), so a reader never takes a half-written one.
//
// A call pays for every shared read-modify-write it makes (a locked
// instruction, and a cache line pulled from the other threads), so the
// region keeps only what cannot be derived: per function its calls, their
// time and the time of those that waited; the library's and the waiting
// time are the functions' sums, read when a profile is read.
//
// Times in the region are its clock's ticks (ProfileClock), converted when
// it is read; only the start and the exit are CLOCK_MONOTONIC nanoseconds.
//
// The file: Header, then kMaxFunctions FunctionSlots, then `capacity`
// SpanSlots (call `id` in slot (id - 1) % capacity).
struct ProfileRegion::Header {
  char magic[8];
  uint32_t version;
  uint32_t max_functions;
  uint64_t capacity;
  char token[kTokenBytes];
  uint32_t clock;  // a ProfileClock
  uint32_t unused;
  // One moment on both clocks: where ticks are converted from.
  int64_t start_ns;
  int64_t start_ticks;
  std::atomic<int64_t> end_ns;  // the program's exit; 0 until then
  std::atomic<uint32_t> functions;
  std::atomic<uint32_t> threads;
  // Written by every call, on one cache line: next_call's fetch_add takes it
  // anyway, so raising last_ns there costs no further miss.
  alignas(64) std::atomic<uint64_t> next_call;
  // The end of the latest call, for a program that never exited. Raised by
  // a plain load and store, not a compare-and-swap: two threads ending at
  // once may leave the earlier end here, and Read takes the latest span's
  // end as well, which covers that call.
  std::atomic<int64_t> last_ticks;
};

struct ProfileRegion::FunctionSlot {
  char name[kNameBytes];
  std::atomic<uint32_t> ready;  // 1 once name and waits are written (release)
  uint32_t waits;
  std::atomic<uint64_t> calls;
  // Its outermost calls' time: only those are recorded, so this is its
  // self time as well as its total time.
  std::atomic<int64_t> total_ticks;
  std::atomic<int64_t> waited_ticks;  // of that, in calls that waited for the device
};

// A recorded call is outermost: its depth is always 0, so no slot stores it.
struct ProfileRegion::SpanSlot {
  std::atomic<uint64_t> seq;  // the call's id once written; 0 while being written
  std::atomic<uint32_t> function;
  std::atomic<uint32_t> thread;
  std::atomic<int64_t> start_ticks;
  std::atomic<int64_t> end_ticks;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free,
              "the region is shared between processes: its atomics must be lock-free");

namespace {

constexpr char kMagic[8] = {'G', 'M', 'X', 'P', 'R', 'O', 'F', '1'};

size_t RegionBytes(uint64_t capacity) {
  return sizeof(ProfileRegion::Header) +
         ProfileRegion::kMaxFunctions * sizeof(ProfileRegion::FunctionSlot) +
         capacity * sizeof(ProfileRegion::SpanSlot);
}

absl::Status CheckCapacity(uint64_t capacity) {
  if (capacity == 0 || capacity > ProfileRegion::kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a profile keeps 1 to ", ProfileRegion::kMaxCapacity, " call spans, not ", capacity));
  }
  return absl::OkStatus();
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

// One moment on both clocks: a tick read between two CLOCK_MONOTONIC reads,
// taken to lie halfway between them. A thread preempted in between would
// widen that to milliseconds, so it tries a few times for a narrow one.
void BothClocksNow(ProfileClock clock, int64_t* ns, int64_t* ticks) {
  int64_t narrowest = -1;
  for (int attempt = 0; attempt < 16 && !(narrowest >= 0 && narrowest <= 1000); ++attempt) {
    const int64_t before = MonotonicNanos();
    const int64_t read = ProfileTicks(clock);
    const int64_t after = MonotonicNanos();
    if (narrowest < 0 || after - before < narrowest) {
      narrowest = after - before;
      *ticks = read;
      *ns = before + narrowest / 2;
    }
  }
}

// A region's ticks as CLOCK_MONOTONIC nanoseconds: the TSC's rate is the
// one between the region's start and now.
class TickScale {
 public:
  TickScale(ProfileClock clock, int64_t start_ns, int64_t start_ticks)
      : start_ns_(start_ns), start_ticks_(start_ticks) {
    if (clock == ProfileClock::kMonotonic) return;
    // Two moments too close give a rough rate: a region read within about
    // half a millisecond of its start waits until that much has passed.
    // A start the TSC has not passed (a counter reset under the region)
    // gives no rate: the rate of the next millisecond stands in for it.
    constexpr int64_t kMinTicks = 1000000;
    constexpr int64_t kMaxWaitNs = 10000000;
    int64_t now_ns = 0;
    int64_t now_ticks = 0;
    const int64_t give_up_ns = MonotonicNanos() + kMaxWaitNs;
    do {
      BothClocksNow(clock, &now_ns, &now_ticks);
    } while (now_ticks - start_ticks < kMinTicks && now_ns < give_up_ns);
    int64_t from_ns = start_ns;
    int64_t from_ticks = start_ticks;
    if (now_ticks - start_ticks < kMinTicks) {
      from_ns = now_ns;
      from_ticks = now_ticks;
      do {
        BothClocksNow(clock, &now_ns, &now_ticks);
      } while (now_ns - from_ns < kMaxWaitNs / 10);
    }
    if (now_ticks > from_ticks) {
      ns_per_tick_ =
          static_cast<double>(now_ns - from_ns) / static_cast<double>(now_ticks - from_ticks);
    }
  }
  int64_t Time(int64_t ticks) const { return start_ns_ + Duration(ticks - start_ticks_); }
  int64_t Duration(int64_t ticks) const {
    return std::llround(static_cast<double>(ticks) * ns_per_tick_);
  }

 private:
  int64_t start_ns_;
  int64_t start_ticks_;
  double ns_per_tick_ = 1.0;
};

ProfileClock ReadMachineProfileClock() {
#if defined(__x86_64__)
  std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  if (source >> name && name == "tsc") return ProfileClock::kTsc;
#endif
  return ProfileClock::kMonotonic;
}

}  // namespace

ProfileClock MachineProfileClock() {
  static const ProfileClock clock = ReadMachineProfileClock();
  return clock;
}

absl::Status ProfileRegion::CreateFile(const std::string& path, uint64_t capacity,
                                       absl::string_view token, ProfileClock clock) {
  GPUMUX_RETURN_IF_ERROR(CheckCapacity(capacity));
  if (token.size() >= kTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a profile token has at most ", kTokenBytes - 1, " bytes"));
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return Errno("cannot create the profile file", path);
  const size_t bytes = RegionBytes(capacity);
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return Errno("cannot size the profile file", path);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Errno("cannot map the profile file", path);
  ProfileRegion(base, bytes).Initialize(capacity, token, clock);
  return absl::OkStatus();
}

absl::StatusOr<ProfileRegion> ProfileRegion::MapFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Errno("cannot open the profile file", path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return Errno("cannot read the profile file", path);
  const size_t bytes = static_cast<size_t>(st.st_size);
  const auto not_one = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a gpumux profile file (", why,
                     "): GPUMUX_PROFILE names one `gpumux bottleneck` made"));
  };
  if (bytes < sizeof(Header)) return not_one("too short");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Errno("cannot map the profile file", path);
  ProfileRegion region(base, bytes);
  const Header* header = region.header();
  if (std::memcmp(header->magic, kMagic, sizeof(kMagic)) != 0) return not_one("no magic");
  if (header->version != kVersion || header->max_functions != kMaxFunctions) {
    return not_one(absl::StrCat("version ", header->version));
  }
  if (!CheckCapacity(header->capacity).ok() || RegionBytes(header->capacity) != bytes) {
    return not_one("size");
  }
  // The region's maker chose its clock on this machine (a program in a
  // container without /sys follows the CLI that made its file).
  bool known_clock = header->clock == static_cast<uint32_t>(ProfileClock::kMonotonic);
#if defined(__x86_64__)
  known_clock = known_clock || header->clock == static_cast<uint32_t>(ProfileClock::kTsc);
#endif
  if (!known_clock) return not_one(absl::StrCat("clock ", header->clock));
  region.clock_ = static_cast<ProfileClock>(header->clock);
  return region;
}

absl::StatusOr<ProfileRegion> ProfileRegion::Anonymous(uint64_t capacity, ProfileClock clock) {
  GPUMUX_RETURN_IF_ERROR(CheckCapacity(capacity));
  const size_t bytes = RegionBytes(capacity);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return absl::ErrnoToStatus(errno, "cannot map a profile region");
  ProfileRegion region(base, bytes);
  region.Initialize(capacity, "", clock);
  return region;
}

ProfileRegion::ProfileRegion(void* base, size_t bytes) : base_(base), bytes_(bytes) {}

void ProfileRegion::Initialize(uint64_t capacity, absl::string_view token, ProfileClock clock) {
  Header* h = header();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->version = kVersion;
  h->max_functions = kMaxFunctions;
  h->capacity = capacity;
  std::memcpy(h->token, token.data(), token.size());
  h->clock = static_cast<uint32_t>(clock);
  BothClocksNow(clock, &h->start_ns, &h->start_ticks);
  h->next_call.store(1, std::memory_order_relaxed);
  clock_ = clock;
}

ProfileRegion::ProfileRegion(ProfileRegion&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      clock_(other.clock_) {}

ProfileRegion& ProfileRegion::operator=(ProfileRegion&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    clock_ = other.clock_;
  }
  return *this;
}

ProfileRegion::~ProfileRegion() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

ProfileRegion::Header* ProfileRegion::header() const { return static_cast<Header*>(base_); }

ProfileRegion::FunctionSlot* ProfileRegion::functions() const {
  return reinterpret_cast<FunctionSlot*>(static_cast<char*>(base_) + sizeof(Header));
}

ProfileRegion::SpanSlot* ProfileRegion::spans() const {
  return reinterpret_cast<SpanSlot*>(static_cast<char*>(base_) + sizeof(Header) +
                                     kMaxFunctions * sizeof(FunctionSlot));
}

std::string ProfileRegion::token() const {
  const Header* h = header();
  return std::string(h->token, strnlen(h->token, kTokenBytes));
}

int64_t ProfileRegion::start_ns() const { return header()->start_ns; }

uint64_t ProfileRegion::capacity() const { return header()->capacity; }

void ProfileRegion::Define(uint32_t index, absl::string_view name, bool waits) {
  if (index >= kMaxFunctions) return;
  FunctionSlot& slot = functions()[index];
  if (slot.ready.load(std::memory_order_acquire) == 1) return;
  const absl::string_view stored = name.substr(0, kNameBytes - 1);
  std::memcpy(slot.name, stored.data(), stored.size());
  slot.name[stored.size()] = '\0';
  slot.waits = waits ? 1 : 0;
  slot.ready.store(1, std::memory_order_release);
  Header* h = header();
  uint32_t count = h->functions.load(std::memory_order_relaxed);
  while (count < index + 1 &&
         !h->functions.compare_exchange_weak(count, index + 1, std::memory_order_acq_rel)) {
  }
}

uint64_t ProfileRegion::BeginCall() {
  return header()->next_call.fetch_add(1, std::memory_order_relaxed);
}

uint32_t ProfileRegion::NewThread() {
  return header()->threads.fetch_add(1, std::memory_order_relaxed) + 1;
}

void ProfileRegion::EndCall(uint64_t call_id, uint32_t function, uint32_t thread,
                            int64_t start_ticks, int64_t end_ticks, bool waits) {
  Header* h = header();
  const int64_t elapsed = end_ticks - start_ticks;
  FunctionSlot& f = functions()[function];
  f.calls.fetch_add(1, std::memory_order_relaxed);
  f.total_ticks.fetch_add(elapsed, std::memory_order_relaxed);
  if (waits) f.waited_ticks.fetch_add(elapsed, std::memory_order_relaxed);
  if (h->last_ticks.load(std::memory_order_relaxed) < end_ticks) {
    h->last_ticks.store(end_ticks, std::memory_order_relaxed);
  }
  SpanSlot& s = spans()[(call_id - 1) % h->capacity];
  s.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.function.store(function, std::memory_order_relaxed);
  s.thread.store(thread, std::memory_order_relaxed);
  s.start_ticks.store(start_ticks, std::memory_order_relaxed);
  s.end_ticks.store(end_ticks, std::memory_order_relaxed);
  s.seq.store(call_id, std::memory_order_release);
}

void ProfileRegion::MarkEnd(int64_t end_ns) {
  header()->end_ns.store(end_ns, std::memory_order_relaxed);
}

ProfileRegion::Mark ProfileRegion::MarkNow() const {
  const Header* h = header();
  Mark mark;
  mark.at_ns = MonotonicNanos();
  mark.next_call = h->next_call.load(std::memory_order_relaxed);
  const uint32_t known = std::min(h->functions.load(std::memory_order_acquire), kMaxFunctions);
  mark.functions.resize(known);
  for (uint32_t i = 0; i < known; ++i) {
    const FunctionSlot& slot = functions()[i];
    mark.functions[i] = Counts{.calls = slot.calls.load(std::memory_order_relaxed),
                               .total_ticks = slot.total_ticks.load(std::memory_order_relaxed),
                               .waited_ticks = slot.waited_ticks.load(std::memory_order_relaxed)};
  }
  return mark;
}

HostProfile ProfileRegion::Read(const Mark* from) const {
  const Header* h = header();
  const TickScale scale(clock_, h->start_ns, h->start_ticks);
  HostProfile profile;
  // Functions, less the mark's counts, merged by name (a forked child may
  // name one twice).
  std::map<std::string, size_t> by_name;
  std::vector<uint32_t> index_of(kMaxFunctions, 0);
  const uint32_t known = std::min(h->functions.load(std::memory_order_acquire), kMaxFunctions);
  for (uint32_t i = 0; i < known; ++i) {
    const FunctionSlot& slot = functions()[i];
    if (slot.ready.load(std::memory_order_acquire) != 1) continue;
    Counts counts{.calls = slot.calls.load(std::memory_order_relaxed),
                  .total_ticks = slot.total_ticks.load(std::memory_order_relaxed),
                  .waited_ticks = slot.waited_ticks.load(std::memory_order_relaxed)};
    if (from != nullptr && i < from->functions.size()) {
      const Counts& before = from->functions[i];
      counts.calls -= std::min(counts.calls, before.calls);
      counts.total_ticks -= std::min(counts.total_ticks, before.total_ticks);
      counts.waited_ticks -= std::min(counts.waited_ticks, before.waited_ticks);
    }
    const std::string name(slot.name, strnlen(slot.name, kNameBytes));
    auto [it, added] = by_name.emplace(name, profile.functions.size());
    if (added) profile.functions.push_back(HostFunction{.name = name, .waits = slot.waits != 0});
    HostFunction& f = profile.functions[it->second];
    const int64_t total_ns = scale.Duration(counts.total_ticks);
    f.calls += counts.calls;
    f.self_ns += total_ns;
    f.total_ns += total_ns;
    profile.library_ns += total_ns;
    profile.waiting_ns += scale.Duration(counts.waited_ticks);
    index_of[i] = static_cast<uint32_t>(it->second);
  }
  // Spans: the newest `capacity` calls have slots; those still open, or left
  // open by a crash, have none written.
  const uint64_t next = h->next_call.load(std::memory_order_acquire);
  const uint64_t first = from != nullptr ? from->next_call : 1;
  const uint64_t kept_from = next > h->capacity ? std::max(first, next - h->capacity) : first;
  profile.dropped_calls = kept_from - first;
  uint32_t threads = 0;
  int64_t latest_end_ns = 0;
  for (uint64_t id = kept_from; id < next; ++id) {
    const SpanSlot& s = spans()[(id - 1) % h->capacity];
    if (s.seq.load(std::memory_order_acquire) != id) continue;
    HostCall call{.call_id = id,
                  .function = s.function.load(std::memory_order_relaxed),
                  .thread = s.thread.load(std::memory_order_relaxed),
                  .start_ns = s.start_ticks.load(std::memory_order_relaxed),
                  .end_ns = s.end_ticks.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != id || call.function >= known) continue;
    call.function = index_of[call.function];
    call.start_ns = scale.Time(call.start_ns);
    call.end_ns = scale.Time(call.end_ns);
    threads = std::max(threads, call.thread);
    latest_end_ns = std::max(latest_end_ns, call.end_ns);
    profile.calls.push_back(call);
  }
  std::sort(profile.calls.begin(), profile.calls.end(),
            [](const HostCall& a, const HostCall& b) { return a.start_ns < b.start_ns; });
  profile.threads = from != nullptr ? threads : h->threads.load(std::memory_order_relaxed);
  profile.start_ns = from != nullptr ? from->at_ns : h->start_ns;
  const int64_t end = h->end_ns.load(std::memory_order_relaxed);
  profile.end_ns = end != 0 && from == nullptr ? end : MonotonicNanos();
  if (from == nullptr && end == 0) {
    // The program never exited normally: its last call is the end we know.
    const int64_t last_ticks = h->last_ticks.load(std::memory_order_relaxed);
    profile.end_ns = std::max(
        {h->start_ns, last_ticks != 0 ? scale.Time(last_ticks) : h->start_ns, latest_end_ns});
  }
  return profile;
}

absl::StatusOr<HostProfile> ReadProfileFile(const std::string& path, std::string* token) {
  GPUMUX_ASSIGN_OR_RETURN(ProfileRegion region, ProfileRegion::MapFile(path));
  if (token != nullptr) *token = region.token();
  return region.Read();
}

}  // namespace gpumux
