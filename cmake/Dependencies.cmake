# Third-party dependencies, all from Debian packages (scripts/install-deps.sh).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

# OpenBLAS, the OpenMP build, so BLAS and our own OpenMP loops share one
# thread pool per rank (the pthreads build would start a second pool).
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/install-deps.sh (package libopenblas-openmp-dev)")
endif()
add_library(lattice_openblas INTERFACE)
target_include_directories(lattice_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(lattice_openblas INTERFACE ${OPENBLAS_LIBRARY} OpenMP::OpenMP_CXX)
message(STATUS "OpenBLAS: ${OPENBLAS_LIBRARY}")

# oneDNN (Debian's libdnnl-dev, OpenMP runtime like OpenBLAS): the bf16
# matmuls of runtime.precision: bf16 on CPUs with AVX512-BF16. Optional: a
# build without it refuses bf16 on the CPU with one line.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)
add_library(lattice_dnnl INTERFACE)
if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY)
  target_include_directories(lattice_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
  target_link_libraries(lattice_dnnl INTERFACE ${DNNL_LIBRARY})
  target_compile_definitions(lattice_dnnl INTERFACE LATTICE_HAVE_DNNL=1)
  message(STATUS "oneDNN: ${DNNL_LIBRARY} (bf16 matmuls on CPU)")
else()
  message(STATUS "oneDNN: not found (runtime.precision: bf16 on cpu is refused; install libdnnl-dev)")
endif()
