# Test helpers.
#   lattice_add_test(NAME SOURCES s... LIBS l... [LABELS quick|full])
#       a GoogleTest binary run as one CTest test.
#   add_mpi_test(NAME NP SOURCES s... LIBS l... [LABELS ...])
#       a binary launched through mpirun with NP ranks, one thread each; it
#       brings its own main (usually lattice_mpi_test_main).
#   lattice_add_mpi_test(NAME NPS n... SOURCES s... LIBS l... [LABELS ...])
#       a GoogleTest binary with the MPI-aware main
#       (tests/support/mpi_test_main.cpp), run as NAME_np<n> for every n.
# Tests find ../shared through LATTICE_SHARED_DIR (they skip when it is absent).
find_package(GTest REQUIRED)
get_filename_component(LATTICE_SHARED_DIR ${CMAKE_SOURCE_DIR}/../shared ABSOLUTE)

function(lattice_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS quick full)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} lattice_test_support GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}"
    ENVIRONMENT "LATTICE_SHARED_DIR=${LATTICE_SHARED_DIR};LATTICE_SOURCE_DIR=${CMAKE_SOURCE_DIR};LATTICE_BIN=${CMAKE_BINARY_DIR}/bin/lattice;OMP_NUM_THREADS=2")
endfunction()

function(add_mpi_test name np)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS full)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} lattice_test_support GTest::gtest)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  lattice_mpirun_test(${name} ${np} "${T_LABELS}")
endfunction()

# Registers binary NAME as CTest test NAME_np<NP> run through mpirun.
function(lattice_mpirun_test name np labels)
  add_test(NAME ${name}_np${np}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
            -x OMP_NUM_THREADS=1 $<TARGET_FILE:${name}>)
  set_tests_properties(${name}_np${np} PROPERTIES LABELS "${labels}" TIMEOUT 600
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;LATTICE_SHARED_DIR=${LATTICE_SHARED_DIR};LATTICE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()


function(lattice_add_mpi_test name)
  cmake_parse_arguments(T "" "" "NPS;SOURCES;LIBS;LABELS" ${ARGN})
  list(POP_FRONT T_NPS first_np)
  set(labels)
  if(T_LABELS)
    set(labels LABELS ${T_LABELS})
  endif()
  add_mpi_test(${name} ${first_np} SOURCES ${T_SOURCES} LIBS lattice_mpi_test_main ${T_LIBS} ${labels})
  get_test_property(${name}_np${first_np} LABELS test_labels)
  foreach(np IN LISTS T_NPS)
    lattice_mpirun_test(${name} ${np} "${test_labels}")
  endforeach()
endfunction()
