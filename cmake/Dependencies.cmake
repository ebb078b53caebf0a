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
