// bench_mixture: what a weighted data mixture's interleave costs
// (data/mixture.h, MixtureSchedule), the figure its header quotes for a resume.
//
//   bench_mixture [--sources 2,4,8] [--resume-at 1e6,1e7,1e8] [--repeats N]
//
// For each source count S (weights 1, 2, ..., S, so no two shares are equal):
//   resume   a fresh schedule's first pick at sample index N: the cursor walks
//            from 0 to N once, keeping a snapshot every kStride samples (what
//            the first step after a resume at sample N pays, on every rank)
//   stream   picks of consecutive indices after that, per sample (a training
//            run's steady state: the cursor moves forward by one each time)
//   back     picks of an index kStride - 1 samples behind the cursor (the most
//            a walk from a snapshot costs: a dp rank's slice behind another's)
// Prints each median over --repeats (default 5) runs, single thread, timed in
// this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): the work is one thread's
// arithmetic, so other load on the machine does not inflate it; the resume's
// wall-clock time is printed beside it.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/timer.h"
#include "data/mixture.h"

using lattice::Timer;
using lattice::data::MixtureSchedule;

namespace {

std::vector<int64_t> parse_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 1) || v > 1e12) {
      fmt::print(stderr, "bench_mixture: {} '{}': '{}' is not a count in [1, 1e12]\n", flag, text, item);
      std::exit(2);
    }
    out.push_back(int64_t(v));
    at = comma + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<double> weights_of(int64_t sources) {
  std::vector<double> w;
  for (int64_t s = 1; s <= sources; ++s) w.push_back(double(s));
  return w;
}

// Keeps the compiler from dropping picks whose result is unused.
volatile int64_t g_sink = 0;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The thread CPU seconds `f()` takes.
template <class F>
double cpu_seconds(F&& f) {
  const double start = thread_cpu_seconds();
  f();
  return thread_cpu_seconds() - start;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sources = {2, 4, 8}, resume_at = {1000000, 10000000, 100000000};
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      fmt::print(stderr,
                 "bench_mixture: unknown or incomplete option '{}' (see the header of bench/mixture/main.cpp)\n", a);
      return 2;
    }
    if (a == "--sources")
      sources = parse_list(a, argv[++i]);
    else if (a == "--resume-at")
      resume_at = parse_list(a, argv[++i]);
    else if (a == "--repeats")
      repeats = int(parse_list(a, argv[++i]).at(0));
    else {
      fmt::print(stderr, "bench_mixture: unknown option '{}'\n", a);
      return 2;
    }
  }
  fmt::print("# bench_mixture: medians of {} repeats, one thread; kStride {}\n", repeats, MixtureSchedule::kStride);
  fmt::print("# {:>7} {:>12} {:>10} {:>12} {:>16} {:>14} {:>12}\n", "sources", "resume at", "resume s", "(wall s)",
             "resume ns/sample", "stream ns/pick", "back us/pick");
  for (int64_t s : sources) {
    for (int64_t n : resume_at) {
      std::vector<double> resume, resume_wall, stream, back;
      for (int r = 0; r < repeats; ++r) {
        MixtureSchedule schedule(weights_of(s));
        Timer wall;
        resume.push_back(cpu_seconds([&] { g_sink = g_sink + schedule.pick(n).index; }));
        resume_wall.push_back(wall.seconds());

        constexpr int64_t kStream = 1 << 22;
        stream.push_back(cpu_seconds([&] {
                           for (int64_t i = n + 1; i <= n + kStream; ++i) g_sink = g_sink + schedule.pick(i).index;
                         }) /
                         double(kStream));

        // The cursor is at n + kStream + 1; each pick below walks kStride - 1
        // samples from the snapshot below it, then the cursor is there.
        constexpr int kBack = 16;
        const int64_t top = n + kStream + 1;
        back.push_back(cpu_seconds([&] {
                         for (int k = 0; k < kBack; ++k) {
                           const int64_t at = top - (top % MixtureSchedule::kStride) - 1 - k * MixtureSchedule::kStride;
                           g_sink = g_sink + schedule.pick(std::max<int64_t>(at, 0)).index;
                         }
                       }) /
                       kBack);
      }
      fmt::print("  {:>7} {:>12} {:>10.4f} {:>12.4f} {:>16.2f} {:>14.2f} {:>12.1f}\n", s, n, median(resume),
                 median(resume_wall), 1e9 * median(resume) / double(n), 1e9 * median(stream), 1e6 * median(back));
    }
  }
  return 0;
}
