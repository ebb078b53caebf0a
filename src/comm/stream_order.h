// How a device communicator's work is ordered against the compute stream.
//
// Compute kernels run on one stream per device (core/backend.h: the legacy
// default stream). Each NcclCommunicator enqueues on a stream of its own,
// created non-blocking so that it does not synchronise implicitly with the
// legacy stream. Events alone order the two:
//   1. record `ready` on the compute stream and make the communicator's
//      stream wait for it: the operation starts after every kernel issued
//      before the call, so it reads finished inputs;
//   2. enqueue the NCCL calls on the communicator's stream;
//   3. record `done` on the communicator's stream: Work::test/wait poll it.
// Kernels issued after the call run alongside the transfer (the dp bucket
// all-reduce under the rest of backward). What orders the buffers' next use
// is either the host's Work::wait, or
//   4. Work::wait_on_device: the compute stream waits for `done`, so the
//      kernels issued after it follow the transfer while the host goes on
//      issuing them (tp's collectives: their results are the next kernel's
//      input, and a host wait would idle the GPU while the host issues that
//      kernel).
// The compute stream waits for the communicator's only at step 4.
//
// The sequence is written once, over an API of four calls, so the CUDA
// version (comm/nccl/) and a CPU model of streams and events in the tests
// (tests/comm/test_stream_order.cpp) run the same code.
//
// A step that throws leaves an operation that will never complete; what may
// still touch its buffers depends on how far it got (EnqueueFailure), which
// the caller's `on_failure` is told before the error propagates unchanged.
#pragma once

namespace lattice::comm {

enum class EnqueueFailure {
  before_issue,  // recording or waiting on `ready` failed: nothing was issued on `comm`
  after_issue,   // `enqueue` began (or recording `done` failed): work issued on `comm` may use the buffers
};

// Api provides: using Stream, using Event;
//   void record(Event, Stream)       — cudaEventRecord
//   void wait(Stream, Event)         — cudaStreamWaitEvent
// and `enqueue` puts the communication itself on `comm`.
template <typename Api, typename Enqueue>
void enqueue_after_compute(Api& api, typename Api::Stream compute, typename Api::Stream comm, typename Api::Event ready,
                           typename Api::Event done, Enqueue&& enqueue) {
  api.record(ready, compute);
  api.wait(comm, ready);
  enqueue();
  api.record(done, comm);
}

// The same, calling on_failure(EnqueueFailure) when a step throws, then rethrowing.
template <typename Api, typename Enqueue, typename OnFailure>
void enqueue_after_compute(Api& api, typename Api::Stream compute, typename Api::Stream comm, typename Api::Event ready,
                           typename Api::Event done, Enqueue&& enqueue, OnFailure&& on_failure) {
  EnqueueFailure stage = EnqueueFailure::before_issue;
  try {
    enqueue_after_compute(api, compute, comm, ready, done, [&] {
      stage = EnqueueFailure::after_issue;
      enqueue();
    });
  } catch (...) {
    on_failure(stage);
    throw;
  }
}

// Step 4: work issued on `compute` from now on follows the operation that
// recorded `done`.
template <typename Api>
void compute_waits_for(Api& api, typename Api::Stream compute, typename Api::Event done) {
  api.wait(compute, done);
}

}  // namespace lattice::comm
