// LATTICE_HD marks math written once for both backends: a plain inline
// function for the CPU build, __host__ __device__ under nvcc.
#pragma once

#if defined(__CUDACC__)
#define LATTICE_HD __host__ __device__ __forceinline__
#else
#define LATTICE_HD inline
#endif
