// top: a live view of the daemon's devices and sessions, drawn with ncurses
// (redrawn every --interval, keys change the sort, q quits); --once prints
// one frame to stdout without escape codes. It asks only Device and Observe,
// so it works on the observe-only TCP listener too.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "client/cli/top_view.h"
#include "gpumux/observer.h"

// Last, and as functions: curses' macros (erase, timeout, ...) would rewrite
// what follows.
#define NCURSES_NOMACROS
#include <curses.h>

namespace gpumux {
namespace {

constexpr double kMinInterval = 0.1;
constexpr double kMaxInterval = 3600;

volatile std::sig_atomic_t g_stop = 0;

void OnStopSignal(int /*signal*/) { g_stop = 1; }

std::string Clock() { return absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()); }

// Restores the terminal however the loop ends, and the signal handlers.
class Screen {
 public:
  static std::unique_ptr<Screen> Open() {
    // The handlers from before ncurses installs its own, to restore.
    struct sigaction old_int = {}, old_term = {};
    sigaction(SIGINT, nullptr, &old_int);
    sigaction(SIGTERM, nullptr, &old_term);
    SCREEN* screen = newterm(nullptr, stdout, stdin);
    if (screen == nullptr) return nullptr;
    return std::unique_ptr<Screen>(new Screen(screen, old_int, old_term));
  }
  ~Screen() {
    endwin();
    delscreen(screen_);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void Draw(const TopFrame& frame) {
    erase();
    const int rows = LINES, cols = COLS;
    for (int i = 0; i < static_cast<int>(frame.lines.size()) && i < rows; ++i) {
      const int attributes = i == 0 ? A_BOLD : i == frame.column_header ? A_REVERSE : A_NORMAL;
      attron(attributes);
      mvaddnstr(i, 0, frame.lines[i].c_str(), cols);
      if (i == frame.column_header) {  // the reversed bar spans the screen
        for (int x = static_cast<int>(frame.lines[i].size()); x < cols; ++x) addch(' ');
      }
      attroff(attributes);
    }
    refresh();
  }

 private:
  Screen(SCREEN* screen, const struct sigaction& old_int, const struct sigaction& old_term)
      : screen_(screen), old_int_(old_int), old_term_(old_term) {
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    // SIGINT and SIGTERM end the loop, which restores the terminal; without
    // SA_RESTART getch returns at once.
    struct sigaction action = {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
  }

  SCREEN* screen_;
  const struct sigaction old_int_;
  const struct sigaction old_term_;
};

}  // namespace

int RunTop(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"interval", true}, {"once"}});
  absl::Status status = parsed.status();
  if (status.ok() && !parsed->positional.empty()) {
    status = absl::InvalidArgumentError("unexpected argument " + parsed->positional.front());
  }
  double interval = 1;
  if (status.ok() && parsed->Has("interval")) {
    const std::string text = *parsed->Get("interval");
    if (!absl::SimpleAtod(text, &interval) || !std::isfinite(interval) || interval < kMinInterval ||
        interval > kMaxInterval) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "--interval wants seconds in [0.1, 3600] (fractions allowed), got '", text, "'"));
    }
  }
  const bool once = status.ok() && parsed->Has("once");
  // It draws on the process's own terminal, so only when the command prints
  // there (tests run commands with streams of their own).
  if (status.ok() && !once && (context.out != &std::cout || isatty(STDOUT_FILENO) == 0)) {
    status = absl::InvalidArgumentError(
        "top draws on a terminal and stdout is not one; --once prints one frame for a pipe");
  }
  if (!status.ok()) return UsageError(context, status.message(), kTopUsage);

  TopFrameOptions options{.address = context.address, .interval_seconds = interval};
  auto observer = std::make_unique<Observer>(context.address, context.security);
  if (once) {
    absl::StatusOr<TopSample> sample = TakeTopSample(*observer);
    if (!sample.ok()) return ReportError(context, sample.status());
    options.clock = Clock();
    for (const std::string& line : FormatTopFrame(sample, options).lines) {
      *context.out << line << "\n";
    }
    return kExitOk;
  }

  g_stop = 0;
  std::unique_ptr<Screen> screen = Screen::Open();
  if (screen == nullptr) {
    return ReportError(context, absl::FailedPreconditionError(absl::StrCat(
                                    "cannot draw on this terminal (TERM=",
                                    getenv("TERM") == nullptr ? "" : getenv("TERM"), ")")));
  }
  options.interactive = true;
  absl::StatusOr<TopSample> sample = absl::UnavailableError("not asked yet");
  absl::Time next = absl::InfinitePast();
  while (g_stop == 0) {
    if (absl::Now() >= next) {
      sample = TakeTopSample(*observer);
      // A channel to a daemon that went away backs off ever longer; a fresh
      // one reconnects as soon as the daemon is back.
      if (!sample.ok()) observer = std::make_unique<Observer>(context.address, context.security);
      options.clock = Clock();
      next = absl::Now() + absl::Seconds(interval);
    }
    screen->Draw(FormatTopFrame(sample, options));
    const int64_t wait_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now()));
    timeout(static_cast<int>(std::min<int64_t>(wait_ms, 1000)));
    const int key = getch();
    switch (key) {
      case 'q':
      case 'Q':
        return kExitOk;
      case 's':
        options.sort = NextTopSort(options.sort);
        break;
      case 'a':
      case 'm':
        options.sort = TopSort::kAllocated;
        break;
      case 'r':
        options.sort = TopSort::kReserved;
        break;
      case 'p':
        options.sort = TopSort::kPeak;
        break;
      case 'i':
        options.sort = TopSort::kSessionId;
        break;
      default:  // KEY_RESIZE included: ncurses has the new size, the loop redraws
        break;
    }
  }
  return kExitOk;
}

}  // namespace gpumux
