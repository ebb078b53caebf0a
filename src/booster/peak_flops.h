// The peak FLOP rate that `mfu` is measured against.
// On the CPU, runtime.peak_flops = 0 means: measure the sgemm rate of this
// rank's thread pool at start-up (best of a few 1024^3 products, ~0.2 s).
#pragma once

namespace lattice {

double measure_sgemm_flops();  // FLOP/s, current thread count

}  // namespace lattice
