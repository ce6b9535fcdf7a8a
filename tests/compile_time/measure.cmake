# Compiles a reference translation unit and SOURCE (twice each, keeping the faster), and fails if
# SOURCE takes more than RATIO_PERCENT percent of the reference's time (wall clock). The reference (plain standard-library
# C++) measures the machine: CI and development machines differ by 1.5x and more in compile
# speed, so a budget in seconds would pass on one and fail on another.
#
# cmake -DCOMPILER=<c++> -DFLAGS="<flags>" -DINCLUDE_DIR=<dir> -DSOURCE=<file.cpp>
#       -DREFERENCE=<file.cpp> -DOUTPUT=<file.o> -DRATIO_PERCENT=<n> -P measure.cmake
foreach(var COMPILER INCLUDE_DIR SOURCE REFERENCE OUTPUT RATIO_PERCENT)
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

# Each twice, alternating, keeping the faster time of each: the machines are shared, and a single
# compile can take 25% longer than the next.
compile_timed("${REFERENCE}" ref_ms)
compile_timed("${SOURCE}" src_ms)
compile_timed("${REFERENCE}" ref2_ms)
compile_timed("${SOURCE}" src2_ms)
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
