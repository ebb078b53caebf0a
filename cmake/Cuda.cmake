# LATTICE_CUDA=AUTO builds the CUDA backend whenever /usr/local/cuda/bin/nvcc
# exists. The backend is its own shared library (liblattice_cuda.so), loaded
# at run time, so the lattice binary starts on machines without CUDA libraries.
set(LATTICE_HAVE_CUDA OFF)
if(LATTICE_CUDA STREQUAL "AUTO" OR LATTICE_CUDA STREQUAL "ON")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(LATTICE_HAVE_CUDA ON)
  elseif(LATTICE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LATTICE_CUDA=ON but nvcc was not found (expected /usr/local/cuda/bin/nvcc)")
  endif()
endif()
if(LATTICE_HAVE_CUDA)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)  # A100 and H100 only: keeps the build short
  endif()
  enable_language(CUDA)
  # CMake < 3.26 does not know nvcc's C++20 flag and rejects CUDA20; nvcc 12+ takes -std=c++20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "Lattice CUDA backend: ${LATTICE_HAVE_CUDA}")
