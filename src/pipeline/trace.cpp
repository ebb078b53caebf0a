#include "pipeline/trace.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace lattice::pipeline {
namespace {

struct Style {
  const char* cat;
  const char* code;
  int tid;
};

Style style(ActionKind k) {
  switch (k) {
    case ActionKind::forward:
      return {"forward", "F", 0};
    case ActionKind::backward:
      return {"backward", "B", 0};
    case ActionKind::send_forward:
      return {"send", "SF", 1};
    case ActionKind::send_backward:
      return {"send", "SB", 1};
    case ActionKind::recv_forward:
      return {"recv", "RF", 2};
    case ActionKind::recv_backward:
      return {"recv", "RB", 2};
  }
  return {"?", "?", 0};
}

}  // namespace

std::string chrome_trace_events(const std::vector<TraceSpan>& spans, int rank) {
  std::string out =
      fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {0}, "args": {{"name": "rank {0}"}}}})", rank);
  for (const TraceSpan& s : spans) {
    const Style st = style(s.kind);
    out += fmt::format(
        ",\n{{\"name\": \"{}{}.c{}\", \"cat\": \"{}\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": {:.3f}, \"pid\": {}, "
        "\"tid\": {}, \"args\": {{\"microbatch\": {}, \"chunk\": {}}}}}",
        st.code, s.microbatch, s.chunk, st.cat, s.begin_s * 1e6, (s.end_s - s.begin_s) * 1e6, rank, st.tid,
        s.microbatch, s.chunk);
  }
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans, int rank) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  LATTICE_CHECK(f != nullptr, "log.trace: cannot write {}: {}", path, std::strerror(errno));
  const std::string text =
      fmt::format("{{\"traceEvents\": [\n{}\n], \"displayTimeUnit\": \"ms\"}}\n", chrome_trace_events(spans, rank));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  LATTICE_CHECK(ok && closed, "log.trace: writing {} failed: {}", path, std::strerror(errno));
}

}  // namespace lattice::pipeline
