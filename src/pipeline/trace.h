// The per-rank timeline of a schedule run: one span per forward, backward,
// send and receive, written in the Chrome trace event format (JSON), which
// Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
// Times are seconds of the steady clock (core/timer.h now_seconds), shared by
// all ranks of one node, so the files of several ranks line up when loaded
// together. In the file: pid = rank, tid 0 compute, 1 sends, 2 receives;
// "ts"/"dur" in microseconds; cat is forward, backward, send or recv.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace lattice::pipeline {

struct TraceSpan {
  ActionKind kind;
  int microbatch = 0;
  int chunk = 0;
  double begin_s = 0, end_s = 0;
};

// The events of one rank, as JSON objects separated by commas (no brackets),
// so callers can merge ranks into one traceEvents array.
std::string chrome_trace_events(const std::vector<TraceSpan>& spans, int rank);
// A complete file {"traceEvents": [...], "displayTimeUnit": "ms"}; throws on I/O errors.
void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans, int rank);

}  // namespace lattice::pipeline
