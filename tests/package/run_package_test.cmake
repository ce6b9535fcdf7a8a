# Package test driver, run by CTest as `cmake -P`.
#
#   MODE=install       configure tessera alone, `cmake --install` it into WORK_DIR/prefix, then
#                      build and run tests/package/consumer against that prefix (find_package) and
#                      against tessera's build tree (the export() file).
#   MODE=subdirectory  build and run tests/package/consumer_subdir, which add_subdirectory()s
#                      the tessera source tree.
#
# Also takes SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER, ENABLE_OPENMP.
foreach(var MODE SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_package_test.cmake: ${var} is not set")
  endif()
endforeach()

set(here "${CMAKE_CURRENT_LIST_DIR}")
set(common -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
if(MAKE_PROGRAM)
  list(APPEND common "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(DEFINED ENABLE_OPENMP)
  list(APPEND common "-DTESSERA_ENABLE_OPENMP=${ENABLE_OPENMP}")
endif()

function(step what)
  message(STATUS "package test: ${what}")
  execute_process(COMMAND ${ARGN} COMMAND_ERROR_IS_FATAL ANY)
endfunction()

# Configure, build and run one consumer project; its app exits nonzero on a wrong result.
function(consume label source_dir binary_dir)
  step("configure ${label}" "${CMAKE_COMMAND}" -S "${source_dir}" -B "${binary_dir}" ${common}
       ${ARGN})
  step("build ${label}" "${CMAKE_COMMAND}" --build "${binary_dir}")
  step("run ${label}" "${binary_dir}/app")
endfunction()

# Start clean: a stale prefix or cache would hide a broken install.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(MODE STREQUAL "install")
  set(build "${WORK_DIR}/tessera-build")
  set(prefix "${WORK_DIR}/prefix")
  step("configure tessera" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${build}" ${common}
       -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_EXAMPLES=OFF)
  step("install tessera" "${CMAKE_COMMAND}" --install "${build}" --prefix "${prefix}")

  foreach(f include/tessera/tessera.hpp include/tessera/config.hpp)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "package test: ${f} was not installed")
    endif()
  endforeach()
  file(GLOB_RECURSE configs "${prefix}/*/tesseraConfig.cmake")
  file(GLOB_RECURSE versions "${prefix}/*/tesseraConfigVersion.cmake")
  if(NOT configs OR NOT versions)
    message(FATAL_ERROR "package test: tesseraConfig.cmake / tesseraConfigVersion.cmake missing")
  endif()
  file(GLOB_RECURSE leaked "${prefix}/*/*warnings*")
  if(leaked)
    message(FATAL_ERROR "package test: private build files were installed: ${leaked}")
  endif()

  consume("consumer (installed prefix)" "${here}/consumer" "${WORK_DIR}/consumer-prefix"
          "-DCMAKE_PREFIX_PATH=${prefix}" "-DTESSERA_EXPECTED_DIR=${prefix}")
  consume("consumer (build tree)" "${here}/consumer" "${WORK_DIR}/consumer-buildtree"
          "-Dtessera_DIR=${build}" "-DTESSERA_EXPECTED_DIR=${build}")
elseif(MODE STREQUAL "subdirectory")
  consume("consumer (add_subdirectory)" "${here}/consumer_subdir" "${WORK_DIR}/consumer"
          "-DTESSERA_SOURCE_DIR=${SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_package_test.cmake: unknown MODE '${MODE}'")
endif()
message(STATUS "package test (${MODE}): passed")
