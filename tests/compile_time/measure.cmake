# Compiles a reference translation unit and SOURCE (twice each, keeping the faster), and fails if
# SOURCE takes more than RATIO_PERCENT percent of the reference's time (wall clock). The reference
# (plain standard-library C++) measures the machine: CI and development machines differ by 1.5x
# and more in compile speed, so a budget in seconds would pass on one and fail on another.
# The two compile at the same time, one per core, so that they share the machine alike (and the
# test, which runs alone, takes half as long).
#
# cmake -DCOMPILER=<c++> -DFLAGS="<flags>" -DINCLUDE_DIR=<dir> -DSOURCE=<file.cpp>
#       -DREFERENCE=<file.cpp> -DOUTPUT=<file.o> -DRATIO_PERCENT=<n> -P measure.cmake
# Internally, with -DONE=<file.cpp> -DMS_FILE=<file>: compiles ONE to OUTPUT and writes the
# milliseconds it took to MS_FILE.
set(_required COMPILER INCLUDE_DIR OUTPUT)
if(NOT DEFINED ONE)
  list(APPEND _required SOURCE REFERENCE RATIO_PERCENT)
endif()
foreach(var IN LISTS _required)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "measure.cmake: ${var} is not set")
  endif()
endforeach()

separate_arguments(flags UNIX_COMMAND "${FLAGS}")
get_filename_component(out_dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${out_dir}")

# Wall clock in milliseconds, seconds and microseconds taken from one timestamp so they cannot
# straddle a second boundary (%f needs CMake >= 3.23).
macro(now_ms out)
  string(TIMESTAMP _now "%s;%f" UTC)
  list(GET _now 0 _s)
  list(GET _now 1 _us)
  math(EXPR ${out} "${_s} * 1000 + ${_us} / 1000")
endmacro()

# Compiles src to OUTPUT; sets ${out_ms} to the milliseconds it took.
function(compile_timed src out_ms)
  file(REMOVE "${OUTPUT}")
  now_ms(start)
  execute_process(
    COMMAND "${COMPILER}" ${flags} "-I${INCLUDE_DIR}" -c "${src}" -o "${OUTPUT}"
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  now_ms(stop)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compile_time: compiling ${src} failed (${rc}):\n${out}")
  endif()
  math(EXPR elapsed "${stop} - ${start}")
  set(${out_ms} ${elapsed} PARENT_SCOPE)
endfunction()

# "12.345 s" for a count of milliseconds.
function(seconds ms out)
  math(EXPR whole "${ms} / 1000")
  math(EXPR frac "${ms} % 1000")
  string(LENGTH "${frac}" len)
  while(len LESS 3)
    string(PREPEND frac "0")
    math(EXPR len "${len} + 1")
  endwhile()
  set(${out} "${whole}.${frac} s" PARENT_SCOPE)
endfunction()

if(DEFINED ONE)
  compile_timed("${ONE}" ms)
  file(WRITE "${MS_FILE}" "${ms}")
  return()
endif()

# The reference and SOURCE at once, each compiled by a child cmake (execute_process starts the
# commands of one call together, as a pipeline whose pipes they leave unused); sets
# ${ref_out} and ${src_out} to their milliseconds.
function(compile_both ref_out src_out)
  set(child "${CMAKE_COMMAND}" "-DCOMPILER=${COMPILER}" "-DFLAGS=${FLAGS}"
            "-DINCLUDE_DIR=${INCLUDE_DIR}")
  execute_process(
    COMMAND ${child} "-DONE=${REFERENCE}" "-DOUTPUT=${OUTPUT}.reference.o"
            "-DMS_FILE=${OUTPUT}.reference.ms" -P "${CMAKE_CURRENT_LIST_FILE}"
    COMMAND ${child} "-DONE=${SOURCE}" "-DOUTPUT=${OUTPUT}" "-DMS_FILE=${OUTPUT}.ms" -P
            "${CMAKE_CURRENT_LIST_FILE}"
    RESULTS_VARIABLE rcs
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rcs STREQUAL "0;0")
    message(FATAL_ERROR "compile_time: a compile failed (${rcs}):\n${out}")
  endif()
  file(READ "${OUTPUT}.reference.ms" r)
  file(READ "${OUTPUT}.ms" s)
  set(${ref_out} ${r} PARENT_SCOPE)
  set(${src_out} ${s} PARENT_SCOPE)
endfunction()

# Twice, keeping the faster time of each: the machines are shared, and a single compile can take
# 25% longer than the next.
compile_both(ref_ms src_ms)
compile_both(ref2_ms src2_ms)
if(ref2_ms LESS ref_ms)
  set(ref_ms ${ref2_ms})
endif()
if(src2_ms LESS src_ms)
  set(src_ms ${src2_ms})
endif()
seconds(${ref_ms} ref_s)
seconds(${src_ms} src_s)
math(EXPR percent "${src_ms} * 100 / ${ref_ms}")
string(JOIN " " shown ${flags})
message("compile_time: ${COMPILER} ${shown}")
message("compile_time: ${SOURCE}: ${src_s}; ${REFERENCE}: ${ref_s}; "
        "${percent}% of the reference (limit ${RATIO_PERCENT}%)")
if(percent GREATER RATIO_PERCENT)
  message(FATAL_ERROR "compile_time: ${percent}% of the reference exceeds the ${RATIO_PERCENT}% limit")
endif()
