// Pipeline schedules as pure plans: for each rank, the list of actions it
// runs (forward / backward of a (microbatch, chunk), and the P2P transfers
// between them). The interpreter (pipeline/interpreter.h) executes a plan;
// verify_plans proves a set of plans correct before anything runs.
//
// A schedule is only an order of compute actions, grouped into steps.
// build_plan derives the transfers from it, the same way for every schedule:
// one P2P batch runs between consecutive steps, holding the sends of the
// step before (outputs of its forwards, input gradients of its backwards) and
// the receives of the step after (inputs of its forwards, output gradients of
// its backwards). With one compute per step, 1F1B's steady state reads F(i),
// [send_forward i + recv_backward j], B(j), [send_backward j + recv_forward
// i+1]: Megatron's send_forward_recv_backward / send_backward_recv_forward.
// Interleaved 1F1B uses Megatron's steps (F in warm-up, F + B in the steady
// state, B in cool-down), so a steady batch carries up to four transfers;
// with one compute per step the ring of the interleaved schedule deadlocks
// (the verifier finds it). Transfers with no peer (the first model chunk
// receives no input, the last no gradient) are left out of the plan.
//
// Batches: a P2P action with `fused` set starts together with the P2P action
// before it (one batch_send_recv, waited as one). Sends are treated as
// blocking until the matching receive is posted (rendezvous), the strictest
// transport, by the verifier and by the tests.
//
// Chunks: `chunk` is the virtual stage on this rank (0 unless interleaved);
// model chunk = chunk * stages + stage (pipeline/stage_manager.h).
#pragma once

#include <string>
#include <vector>

namespace lattice::pipeline {

enum class ActionKind { forward, backward, send_forward, recv_forward, send_backward, recv_backward };

struct Action {
  ActionKind kind;
  int microbatch = 0;
  int chunk = 0;
  bool fused = false;  // P2P only: started together with the previous P2P action
  bool operator==(const Action&) const = default;
};
using Plan = std::vector<Action>;

const char* action_name(ActionKind k);  // "forward", "send_forward", ...
bool is_p2p(ActionKind k);
std::string describe_action(const Action& a);  // "recv_forward microbatch 3 chunk 1"

// The schedules. Each returns the plan of `stage` (0-based) of `stages`.
// GPipe: every forward, then every backward (microbatch order).
Plan plan_gpipe(int stages, int stage, int microbatches);
// 1F1B (PipeDream-flush): warm-up of min(stages - stage - 1, microbatches)
// forwards, then one forward / one backward alternately, then the cool-down backwards.
Plan plan_1f1b(int stages, int stage, int microbatches);
// Megatron's interleaved 1F1B: `virtual_stages` chunks per rank; the forward
// order runs rounds of `stages` microbatches through chunk 0, then chunk 1, ...;
// warm-up = (stages - stage - 1) * 2 + (virtual_stages - 1) * stages forwards
// (all of them when microbatches == stages). microbatches % stages == 0.
Plan plan_interleaved_1f1b(int stages, int stage, int microbatches, int virtual_stages);
// Evaluation: forwards only, in the interleaved forward order when virtual_stages > 1.
Plan plan_forward_only(int stages, int stage, int microbatches, int virtual_stages = 1);

// The plan for a given order of compute actions (forward/backward only),
// grouped into steps: one P2P batch runs between consecutive steps, holding
// the previous step's sends and the next step's receives.
Plan build_plan(int stages, int stage, int virtual_stages, const std::vector<std::vector<Action>>& steps);
// One compute action per step.
Plan build_plan(int stages, int stage, int virtual_stages, const std::vector<Action>& compute_order);

// The most (chunk, microbatch) contexts the rank holds at once: begun by a
// forward and not yet released by its backward (1F1B: stages - stage; GPipe:
// all). In a forward-only plan a context ends with its forward.
int max_in_flight(const Plan& plan);
// The idle fraction of a stage that the schedule predicts with equal-cost
// chunks and free transfers (metrics.jsonl `bubble_theory`): (p - 1) / (m + p - 1)
// for GPipe and 1F1B; interleaving shrinks the fill and drain by v,
// (p - 1) / (v m + p - 1) (Narayanan et al. 2021). 0 for p == 1.
double bubble_theory(int stages, int microbatches, int virtual_stages = 1);
// Forward / backward action counts.
int count_actions(const Plan& plan, ActionKind kind);

// ---- verification ----
struct VerifyReport {
  bool ok = true;
  std::vector<std::string> errors;  // one line each
  std::string text() const;         // "plans verified" or the errors, one per line
};
// Simulates all ranks' plans together (all_ranks[s] is stage s's plan) and
// checks: every transfer has a peer and meets its matching transfer (same
// microbatch, same model-chunk boundary, the right rank); every (microbatch,
// model chunk) runs forward once (and backward once, unless no plan has a
// backward); on each rank forward precedes backward; forward of model chunk c
// runs after forward of c - 1, backward of c after backward of c + 1; and
// nothing deadlocks with sends blocking until their receive is posted; and
// the transfers between two ranks are posted in the same order on both sides,
// so a transport without tags (NCCL) pairs them as the keys do. A deadlock
// names the first stuck action of every rank.
VerifyReport verify_plans(const std::vector<Plan>& all_ranks, int virtual_stages = 1);

// `lattice plan`: one column per stage (pp rank), one row per step (a compute action or
// a P2P batch): "F3" forward of microbatch 3, "B3", "SF3" send_forward,
// "RB2" recv_backward, "SF3+RB0" a batch; ".c1" marks chunk 1 when interleaved.
std::string format_schedule_table(const std::vector<Plan>& plans, int virtual_stages = 1);

}  // namespace lattice::pipeline
