// Groups of daemons (group.proto) against plain Gloo, in the same run:
//   - N gpumuxd processes (host backend, TCP full mode with TLS and a token
//     made by openssl) form a group; a client of each (a thread here) runs
//     all_reduce (f32 sum) of S bytes on its own memory, for S from 1 MiB
//     to --max-mib;
//   - N plain Gloo processes (this program as children, --plain-rank) run
//     the same ring all_reduce on host buffers of the same sizes, connected
//     through a FileStore;
// round by round in turn (on a small shared machine the time of a small
// all_reduce drifts by several times over a minute; alternating rounds, and
// which side goes first, lets both sides see the same drift), the slowest
// rank's time of each round.
//
// Bandwidth is measured as nccl-tests and torch.distributed's users measure
// it: a batch of all_reduces back to back, then one wait for them all (the
// group's calls with async_op, then Synchronize; plain Gloo's one after the
// other), as a training step's gradient buckets go. A batch moves at least
// --batch-mib (32 calls at most, 2 at least), so that one wait's round trip
// is a small part of it: `<size>_gbps`, and `<size>_over_gloo`, the median
// over rounds of each round's plain time over its group time. One waited
// call on its own (`<size>_one_call_*`) shows the fixed cost of a call
// (its RPC), which a batch pays once. Also the time to form a fresh group,
// next to a 4-byte all_reduce on an existing one.
//
// usage: gpumux_group_bench [--gpumuxd PATH] [--ranks N] [--rounds R] [--max-mib M]
//                           [--batch-mib B]

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/common/reduce_op.h"
#include "gpumux/copy.h"
#include "gpumux/device_buffer.h"
#include "gpumux/distributed.h"
#include "gpumux/memory.h"
#include "tests/support/free_port.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string gpumuxd;
  int ranks = 2;
  int rounds = 30;
  int max_mib = 256;
  int batch_mib = 64;
  // Set in a plain Gloo child.
  int plain_rank = -1;
  std::string plain_dir;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// plain[i] / group[i] for every round, sorted.
std::vector<double> Ratios(const std::vector<double>& plain, const std::vector<double>& group) {
  std::vector<double> ratios;
  for (size_t i = 0; i < plain.size(); ++i) ratios.push_back(plain[i] / group[i]);
  std::sort(ratios.begin(), ratios.end());
  return ratios;
}

// All_reduces per batch for `bytes`: enough to move --batch-mib, 2 to 32.
int BatchCalls(uint64_t bytes, int batch_mib) {
  const uint64_t calls = ((uint64_t{1} * batch_mib << 20) + bytes - 1) / bytes;
  return static_cast<int>(std::clamp<uint64_t>(calls, 2, 32));
}

// 4 bytes (a call's fixed cost), then 1 MiB, 4 MiB, ... up to max_mib.
std::vector<uint64_t> Sizes(int max_mib) {
  std::vector<uint64_t> sizes = {4};
  for (uint64_t mib = 1; mib <= static_cast<uint64_t>(max_mib); mib *= 4)
    sizes.push_back(mib << 20);
  return sizes;
}

std::vector<float> NonZero(uint64_t count, int rank) {
  std::mt19937 rng(static_cast<uint32_t>(rank + 1));
  std::uniform_real_distribution<float> pick(0.5f, 1.5f);
  std::vector<float> v(count);
  for (float& x : v) x = pick(rng);
  return v;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "gpumux_group_bench: %s\n", what.c_str());
  return 1;
}

// A plain Gloo rank: every size, rounds + 1 times (the first is warm-up),
// each when a byte arrives on stdin: after a barrier one all_reduce, after
// another a batch back to back; writes each round's two times in seconds to
// stdout, one line each.
int PlainRank(const Flags& flags) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(flags.plain_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(flags.plain_rank, flags.ranks);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, device);
  uint32_t tag = 0;
  for (uint64_t bytes : Sizes(flags.max_mib)) {
    std::vector<float> data = NonZero(bytes / 4, flags.plain_rank);
    for (int round = 0; round < flags.rounds + 1; ++round) {
      char go;
      if (read(STDIN_FILENO, &go, 1) != 1) return 1;
      // `calls` all_reduces after a barrier, in seconds.
      auto timed = [&](int calls) {
        gloo::BarrierOptions barrier(context);
        barrier.setTag(tag++);
        gloo::barrier(barrier);
        const Clock::time_point start = Clock::now();
        for (int call = 0; call < calls; ++call) {
          gloo::AllreduceOptions options(context);
          options.setOutput(data.data(), data.size());
          options.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          options.setTag(tag++);
          gloo::allreduce(options);
        }
        return std::chrono::duration<double>(Clock::now() - start).count();
      };
      const double one = timed(1);
      const double batch = timed(BatchCalls(bytes, flags.batch_mib));
      std::printf("%.9f %.9f\n", one, batch);
      std::fflush(stdout);
    }
  }
  return 0;
}

// The plain ranks, as the coordinator sees them: a pipe to each one's
// stdin and one from its stdout.
struct PlainRanks {
  std::vector<pid_t> pids;
  std::vector<int> go;
  std::vector<FILE*> times;

  // One round of every rank: the slowest rank's seconds for one call and
  // for a batch; false on failure.
  bool Round(double* one, double* batch) {
    for (int fd : go) {
      if (write(fd, "g", 1) != 1) return false;
    }
    *one = 0;
    *batch = 0;
    for (FILE* in : times) {
      double rank_one = 0;
      double rank_batch = 0;
      if (std::fscanf(in, "%lf %lf", &rank_one, &rank_batch) != 2) return false;
      *one = std::max(*one, rank_one);
      *batch = std::max(*batch, rank_batch);
    }
    return true;
  }

  // Closes the pipes and waits for the ranks; false when one failed.
  bool Finish() {
    for (int fd : go) close(fd);
    for (FILE* in : times) std::fclose(in);
    bool ok = true;
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return ok;
  }
};

// Runs body(rank) for every rank on its own thread, at once; the slowest
// rank's seconds.
template <typename Body>
double SlowestRankOnce(int ranks, Body body) {
  std::vector<double> seconds(ranks);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ++ready;
      while (ready < ranks) std::this_thread::yield();
      const Clock::time_point start = Clock::now();
      body(r);
      seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  for (std::thread& t : threads) t.join();
  return *std::max_element(seconds.begin(), seconds.end());
}

// SlowestRankOnce rounds + 1 times (the first is warm-up), body(round,
// rank); the median over rounds.
template <typename Body>
double SlowestRank(int ranks, int rounds, Body body) {
  std::vector<double> times;
  for (int round = 0; round < rounds + 1; ++round) {
    const double seconds = SlowestRankOnce(ranks, [&](int r) { body(round, r); });
    if (round > 0) times.push_back(seconds);
  }
  return times.empty() ? 0 : Median(times);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(argc, argv,
                                                       {{"gpumuxd", &flags.gpumuxd},
                                                        {"ranks", &flags.ranks, 2, 8},
                                                        {"rounds", &flags.rounds, 1, 100},
                                                        {"max-mib", &flags.max_mib, 1, 1024},
                                                        {"batch-mib", &flags.batch_mib, 1, 1024},
                                                        {"plain-rank", &flags.plain_rank, -1, 7},
                                                        {"plain-dir", &flags.plain_dir}});
  if (!parsed.ok()) {
    std::fprintf(stderr,
                 "%s\nusage: %s [--gpumuxd PATH] [--ranks N] [--rounds R] [--max-mib M] "
                 "[--batch-mib B]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  if (flags.plain_rank >= 0) return PlainRank(flags);

  char pattern[] = "/tmp/gpumux-group-bench-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string make_certs = absl::StrCat(
      "(cd ", dir, " && openssl req -x509 ", ec,
      " -days 2 -subj '/CN=bench ca' -addext basicConstraints=critical,CA:TRUE -addext "
      "keyUsage=critical,keyCertSign,cRLSign -keyout ca.key -out ca.crt && printf "
      "'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > node.ext && "
      "openssl req ",
      ec,
      " -subj '/CN=gpumuxd' -keyout node.key -out node.csr && openssl x509 -req -days 2 -in "
      "node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile node.ext -out node.crt && echo "
      "bench-token-0123456789 > token && chmod 600 token && mkdir plain) > /dev/null 2>&1");
  if (std::system(make_certs.c_str()) != 0) return Fail("openssl could not make the certificates");

  // The plain Gloo ranks, children of this program, each waiting for its
  // first round. A rank that died makes a write to it fail (EPIPE), not
  // end this program.
  std::signal(SIGPIPE, SIG_IGN);
  PlainRanks plain_ranks;
  for (int r = 0; r < flags.ranks; ++r) {
    int go[2];
    int times[2];
    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(times, O_CLOEXEC) != 0) return Fail("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(go[0], STDIN_FILENO);
      dup2(times[1], STDOUT_FILENO);
      const std::string self = "/proc/self/exe";
      std::vector<std::string> args = {argv[0],
                                       absl::StrCat("--ranks=", flags.ranks),
                                       absl::StrCat("--rounds=", flags.rounds),
                                       absl::StrCat("--max-mib=", flags.max_mib),
                                       absl::StrCat("--batch-mib=", flags.batch_mib),
                                       absl::StrCat("--plain-rank=", r),
                                       "--plain-dir=" + dir + "/plain"};
      std::vector<char*> argv_child;
      for (std::string& a : args) argv_child.push_back(a.data());
      argv_child.push_back(nullptr);
      execv(self.c_str(), argv_child.data());
      _exit(127);
    }
    close(go[0]);
    close(times[1]);
    plain_ranks.pids.push_back(pid);
    plain_ranks.go.push_back(go[1]);
    plain_ranks.times.push_back(fdopen(times[0], "r"));
  }
  const std::vector<uint64_t> sizes = Sizes(flags.max_mib);

  // The daemons and a client of each.
  const uint64_t memory = (uint64_t{2} * flags.max_mib + 64) << 20;
  std::vector<std::unique_ptr<gpumux::bench::BenchDaemon>> daemons;
  std::vector<int> ports;
  for (int r = 0; r < flags.ranks; ++r) {
    ports.push_back(gpumux::testing::FreePort());
    daemons.push_back(std::make_unique<gpumux::bench::BenchDaemon>(
        flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
        std::vector<std::string>{
            "--backend=host", "--host-devices=1", absl::StrCat("--host-device-memory=", memory),
            absl::StrCat("--listen=127.0.0.1:", ports.back()), "--tcp-mode=full",
            "--tls-cert=" + dir + "/node.crt", "--tls-key=" + dir + "/node.key",
            "--tls-client-ca=" + dir + "/ca.crt", "--auth-token-file=" + dir + "/token",
            "--group-host=127.0.0.1"}));
  }
  std::vector<std::unique_ptr<gpumux::Client>> clients;
  for (int r = 0; r < flags.ranks; ++r) {
    auto client = gpumux::Client::Connect(daemons[r]->address(), {.client_name = "group_bench"});
    if (!client.ok()) return Fail(client.status().ToString());
    clients.push_back(*std::move(client));
  }
  const std::string rendezvous = absl::StrCat("127.0.0.1:", ports[0]);
  std::atomic<bool> failed{false};
  auto form = [&](const std::string& name) {
    return [&, name](int r) {
      auto info = gpumux::distributed::FormGroup(*clients[r], {.name = name,
                                                               .world_size = flags.ranks,
                                                               .rank = r,
                                                               .rendezvous_address = rendezvous,
                                                               .timeout = absl::Seconds(60)});
      if (!info.ok()) {
        std::fprintf(stderr, "%s\n", info.status().ToString().c_str());
        failed = true;
      }
    };
  };
  const double form_seconds = SlowestRank(
      flags.ranks, flags.rounds, [&](int round, int r) { form(absl::StrCat("fresh", round))(r); });
  SlowestRank(flags.ranks, 0, [&](int, int r) { form("bench")(r); });
  if (failed) return Fail("forming a group failed");
  // The fresh groups go: only the group measured keeps connections.
  for (int round = 0; round < flags.rounds + 1; ++round) {
    for (int r = 0; r < flags.ranks; ++r) {
      if (!gpumux::distributed::DestroyGroup(*clients[r], absl::StrCat("fresh", round)).ok())
        return Fail("destroying a group failed");
    }
  }

  std::vector<gpumux::DeviceBuffer> buffers;
  std::vector<gpumux::DeviceBuffer> small;
  for (int r = 0; r < flags.ranks; ++r) {
    auto buffer = gpumux::memory::Allocate(*clients[r], sizes.back());
    auto tiny = gpumux::memory::Allocate(*clients[r], 4);
    if (!buffer.ok() || !tiny.ok()) return Fail("allocation failed");
    buffers.push_back(*std::move(buffer));
    small.push_back(*std::move(tiny));
  }
  auto all_reduce = [&](int r, gpumux::DeviceBuffer& buffer, uint64_t bytes) {
    const gpumux::TensorRef tensor{
        &buffer, 0, gpumux::Dtype::kFloat32, {static_cast<int64_t>(bytes / 4)}};
    if (!gpumux::distributed::AllReduce(*clients[r], "bench", tensor).ok()) failed = true;
  };
  // A batch of all_reduces with async_op, then a wait for them all.
  auto batch_all_reduces = [&](int r, gpumux::DeviceBuffer& buffer, uint64_t bytes) {
    const gpumux::TensorRef tensor{
        &buffer, 0, gpumux::Dtype::kFloat32, {static_cast<int64_t>(bytes / 4)}};
    for (int call = 0; call < BatchCalls(bytes, flags.batch_mib); ++call) {
      if (!gpumux::distributed::AllReduce(*clients[r], "bench", tensor, gpumux::ReduceOp::kSum,
                                          {.async_op = true})
               .ok())
        failed = true;
    }
    if (!clients[r]->Synchronize(buffer.device()).ok()) failed = true;
  };
  std::printf("group_ranks=%d\n", flags.ranks);
  for (int r = 0; r < flags.ranks; ++r) {
    if (!gpumux::copy::HostToDevice(*clients[r], small[r], 0, NonZero(1, r).data(), 4,
                                    {.wait = true})
             .ok())
      return Fail("upload failed");
  }
  double one_call_4b = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    gpumux::DeviceBuffer* buffer = sizes[i] < 1024 ? small.data() : buffers.data();
    if (sizes[i] >= 1024) {
      for (int r = 0; r < flags.ranks; ++r) {
        std::vector<float> data = NonZero(sizes[i] / 4, r);
        if (!gpumux::copy::HostToDevice(*clients[r], buffers[r], 0, data.data(), sizes[i],
                                        {.wait = true})
                 .ok())
          return Fail("upload failed");
      }
    }
    std::vector<double> plain_one;
    std::vector<double> group_one;
    std::vector<double> plain_batch;
    std::vector<double> group_batch;
    for (int round = 0; round < flags.rounds + 1; ++round) {
      double plain_one_time = 0;
      double plain_batch_time = 0;
      const auto plain_round = [&] {
        return plain_ranks.Round(&plain_one_time, &plain_batch_time);
      };
      // Which side goes first alternates with the rounds.
      if (round % 2 == 0 && !plain_round()) return Fail("a plain Gloo rank failed");
      const double group_one_time =
          SlowestRankOnce(flags.ranks, [&](int r) { all_reduce(r, buffer[r], sizes[i]); });
      const double group_batch_time =
          SlowestRankOnce(flags.ranks, [&](int r) { batch_all_reduces(r, buffer[r], sizes[i]); });
      if (round % 2 == 1 && !plain_round()) return Fail("a plain Gloo rank failed");
      if (round == 0) continue;  // warm-up
      plain_one.push_back(plain_one_time);
      group_one.push_back(group_one_time);
      plain_batch.push_back(plain_batch_time);
      group_batch.push_back(group_batch_time);
    }
    if (failed) return Fail("a group all_reduce failed");
    const int calls = BatchCalls(sizes[i], flags.batch_mib);
    const double group_call = Median(group_batch) / calls;
    const double plain_call = Median(plain_batch) / calls;
    const std::string size =
        sizes[i] < (1u << 20) ? absl::StrCat(sizes[i], "b") : absl::StrCat(sizes[i] >> 20, "mib");
    const std::string name = absl::StrCat("all_reduce_", size);
    std::printf("group_%s_batch_calls=%d\n", name.c_str(), calls);
    if (sizes[i] < (1u << 20)) {
      std::printf("group_%s_us=%.1f\n", name.c_str(), group_call * 1e6);
      std::printf("gloo_%s_us=%.1f\n", name.c_str(), plain_call * 1e6);
    } else {
      std::printf("group_%s_gbps=%.3f\n", name.c_str(), sizes[i] / group_call / 1e9);
      std::printf("gloo_%s_gbps=%.3f\n", name.c_str(), sizes[i] / plain_call / 1e9);
    }
    // The rounds' spread too: the quartiles of the ratio.
    const std::vector<double> ratios = Ratios(plain_batch, group_batch);
    std::printf("group_%s_over_gloo=%.3f\n", name.c_str(), ratios[ratios.size() / 2]);
    std::printf("group_%s_over_gloo_p25=%.3f\n", name.c_str(), ratios[ratios.size() / 4]);
    std::printf("group_%s_over_gloo_p75=%.3f\n", name.c_str(), ratios[ratios.size() * 3 / 4]);
    std::printf("group_%s_one_call_us=%.1f\n", name.c_str(), Median(group_one) * 1e6);
    std::printf("gloo_%s_one_call_us=%.1f\n", name.c_str(), Median(plain_one) * 1e6);
    std::printf("group_%s_one_call_over_gloo=%.3f\n", name.c_str(),
                Median(Ratios(plain_one, group_one)));
    if (sizes[i] < 1024) one_call_4b = Median(group_one);
  }
  std::printf("group_form_fresh_ms=%.2f\n", form_seconds * 1e3);
  std::printf("group_form_fresh_over_existing_all_reduce=%.1f\n", form_seconds / one_call_4b);
  if (!plain_ranks.Finish()) return Fail("a plain Gloo rank failed");
  buffers.clear();
  small.clear();
  clients.clear();
  daemons.clear();
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  return 0;
}
