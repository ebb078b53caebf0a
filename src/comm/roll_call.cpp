#include "comm/roll_call.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "comm/describe.h"
#include "core/poll.h"

namespace lattice::comm {

namespace {

constexpr int kQueryTag = 1, kAnswerTag = 2;
constexpr size_t kMaxText = 200;
constexpr auto kAnswerEvery = std::chrono::milliseconds(10);

// A send in flight and the bytes it reads until it completes.
struct Outgoing {
  MPI_Request req = MPI_REQUEST_NULL;
  std::unique_ptr<std::vector<char>> bytes;
};

struct RollCall {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = -1;
  std::string waiting_in;  // "" = not in a wait
  int64_t nonce = 0;       // of this rank's latest roll call
  std::vector<Outgoing> sends;
  Clock::time_point next_answer{};
};

RollCall g;

void send(int to, int tag, std::vector<char> bytes) {
  Outgoing o{MPI_REQUEST_NULL, std::make_unique<std::vector<char>>(std::move(bytes))};
  if (MPI_Isend(o.bytes->data(), int(o.bytes->size()), MPI_BYTE, to, tag, g.comm, &o.req) == MPI_SUCCESS)
    g.sends.push_back(std::move(o));
}

// Frees the sends that have completed.
void reap() {
  std::erase_if(g.sends, [](Outgoing& o) {
    int done = 0;
    if (MPI_Test(&o.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    return done != 0;
  });
}

std::vector<char> with_nonce(int64_t nonce, const std::string& text) {
  std::vector<char> b(sizeof nonce + text.size());
  std::memcpy(b.data(), &nonce, sizeof nonce);
  std::memcpy(b.data() + sizeof nonce, text.data(), text.size());
  return b;
}

void answer_all() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, g.comm, &flag, &st) != MPI_SUCCESS || !flag) break;
    int64_t nonce = 0;
    if (MPI_Recv(&nonce, int(sizeof nonce), MPI_BYTE, st.MPI_SOURCE, kQueryTag, g.comm, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      break;
    std::string text = g.waiting_in.empty() ? "running, not waiting on a communicator" : "waiting in " + g.waiting_in;
    if (text.size() > kMaxText) text.resize(kMaxText);
    send(st.MPI_SOURCE, kAnswerTag, with_nonce(nonce, text));
  }
  reap();
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return fmt::format("world rank{} {}", ranks.size() == 1 ? "" : "s", rank_list(ranks));
}

}  // namespace

void roll_call_open() {
  if (g.comm != MPI_COMM_NULL) return;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g.comm) != MPI_SUCCESS) {
    g.comm = MPI_COMM_NULL;
    return;
  }
  MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g.comm, &g.rank);
}

void roll_call_close() {
  if (g.comm == MPI_COMM_NULL) return;
  // Sends to a rank that never receives them cannot complete: release them
  // (their bytes stay allocated, since MPI may still read them).
  for (Outgoing& o : g.sends) {
    if (o.req != MPI_REQUEST_NULL) MPI_Request_free(&o.req);
    (void)o.bytes.release();
  }
  g.sends.clear();
  MPI_Comm_free(&g.comm);
  g = RollCall{};
}

namespace {

std::string set_waiting_in(std::string what) { return std::exchange(g.waiting_in, std::move(what)); }

}  // namespace

WaitingIn::WaitingIn(std::string what) : previous_(set_waiting_in(std::move(what))) {}
WaitingIn::~WaitingIn() { set_waiting_in(std::move(previous_)); }

void roll_call_answer() {
  if (g.comm == MPI_COMM_NULL) return;
  const auto t = Clock::now();
  if (t < g.next_answer) return;
  g.next_answer = t + kAnswerEvery;
  answer_all();
}

namespace {

struct Heard {
  std::string report;        // "no answer from ...; world ranks 1,2: waiting in ..." ("" without peers)
  bool all_answered = true;  // every asked rank answered
};

// Asks `world_ranks` (this rank skipped) and waits up to grace_s for answers.
Heard ask(const std::vector<int>& world_ranks, double grace_s) {
  std::vector<int> peers;
  for (int r : world_ranks)
    if (r != g.rank) peers.push_back(r);
  if (peers.empty()) return {};
  const int64_t nonce = ++g.nonce;
  for (int r : peers) send(r, kQueryTag, with_nonce(nonce, ""));
  std::map<int, std::string> answers;
  const auto deadline = deadline_after(grace_s);
  while (answers.size() < peers.size() && Clock::now() < deadline) {
    answer_all();
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, g.comm, &flag, &st) != MPI_SUCCESS) break;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<char> b(size_t(std::max(n, 0)));
    if (MPI_Recv(b.data(), n, MPI_BYTE, st.MPI_SOURCE, kAnswerTag, g.comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    int64_t got = 0;
    if (b.size() < sizeof got) continue;
    std::memcpy(&got, b.data(), sizeof got);
    if (got != nonce) continue;  // a late answer to an earlier roll call
    if (std::find(peers.begin(), peers.end(), st.MPI_SOURCE) == peers.end()) continue;
    answers[st.MPI_SOURCE] = std::string(b.begin() + sizeof got, b.end());
  }
  std::vector<int> silent;
  std::map<std::string, std::vector<int>> by_text;
  for (int r : peers) {
    auto it = answers.find(r);
    if (it == answers.end()) {
      silent.push_back(r);
    } else {
      by_text[it->second].push_back(r);
    }
  }
  Heard h;
  h.all_answered = silent.empty();
  const char* sep = "";
  if (!silent.empty()) {
    h.report += fmt::format("no answer from {} (stopped, or busy outside communication)", ranks_phrase(silent));
    sep = "; ";
  }
  for (const auto& [text, ranks] : by_text) {
    h.report += fmt::format("{}{}: {}", sep, ranks_phrase(ranks), text);
    sep = "; ";
  }
  return h;
}

}  // namespace

std::string roll_call(const std::vector<int>& world_ranks, double grace_s) {
  if (g.comm == MPI_COMM_NULL) return "";
  Heard first = ask(world_ranks, grace_s);
  if (first.report.empty()) return "";
  std::string out = fmt::format("roll call ({:g} s): {}", grace_s, first.report);
  if (!first.all_answered) return out;
  // Every rank asked answered, each waiting on something else (a tp rank
  // whose partner is stopped, a pipeline peer waiting on its dp group): the
  // rank to look at is outside them, so ask the rest of the world too.
  int size = 0;
  MPI_Comm_size(g.comm, &size);
  std::vector<int> rest;
  for (int r = 0; r < size; ++r)
    if (r != g.rank && std::find(world_ranks.begin(), world_ranks.end(), r) == world_ranks.end()) rest.push_back(r);
  if (rest.empty()) return out;
  Heard more = ask(rest, grace_s);
  if (!more.report.empty()) out += "; the other ranks: " + more.report;
  return out;
}

const RollCallHooks& roll_call_hooks() {
  static const RollCallHooks hooks{&set_waiting_in, &roll_call_answer, &roll_call};
  return hooks;
}

}  // namespace lattice::comm
