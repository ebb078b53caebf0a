# Writes version_info.h with the current git commit; run at every build, the
# file is rewritten only when its content changes (no needless rebuilds).
execute_process(COMMAND git -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE LATTICE_GIT_COMMIT
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR LATTICE_GIT_COMMIT STREQUAL "")
  set(LATTICE_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no OUTPUT_VARIABLE dirty
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(LATTICE_GIT_COMMIT "${LATTICE_GIT_COMMIT}-dirty")
  endif()
endif()
configure_file(${SRC}/src/booster/version_info.h.in ${OUT} @ONLY)
