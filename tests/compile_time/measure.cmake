# Compiles one translation unit and fails if it takes longer than LIMIT seconds (wall clock).
#
# cmake -DCOMPILER=<c++> -DFLAGS="<flags>" -DINCLUDE_DIR=<dir> -DSOURCE=<file.cpp>
#       -DOUTPUT=<file.o> -DLIMIT=<seconds> -P measure.cmake
foreach(var COMPILER INCLUDE_DIR SOURCE OUTPUT LIMIT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "measure.cmake: ${var} is not set")
  endif()
endforeach()

separate_arguments(flags UNIX_COMMAND "${FLAGS}")
get_filename_component(out_dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${out_dir}")
file(REMOVE "${OUTPUT}")

# Wall clock in milliseconds, seconds and microseconds taken from one timestamp so they cannot
# straddle a second boundary (%f needs CMake >= 3.23).
macro(now_ms out)
  string(TIMESTAMP _now "%s;%f" UTC)
  list(GET _now 0 _s)
  list(GET _now 1 _us)
  math(EXPR ${out} "${_s} * 1000 + ${_us} / 1000")
endmacro()

now_ms(start)
execute_process(
  COMMAND "${COMPILER}" ${flags} "-I${INCLUDE_DIR}" -c "${SOURCE}" -o "${OUTPUT}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
now_ms(stop)

math(EXPR elapsed_ms "${stop} - ${start}")
math(EXPR whole "${elapsed_ms} / 1000")
math(EXPR frac "${elapsed_ms} % 1000")
string(LENGTH "${frac}" len)
while(len LESS 3)
  string(PREPEND frac "0")
  math(EXPR len "${len} + 1")
endwhile()
string(JOIN " " shown ${flags})
message("compile_time: ${COMPILER} ${shown} ${SOURCE}")
message("compile_time: ${whole}.${frac} s (limit ${LIMIT} s)")

if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile_time: compilation failed (${rc}):\n${out}")
endif()
math(EXPR limit_ms "${LIMIT} * 1000")
if(elapsed_ms GREATER limit_ms)
  message(FATAL_ERROR "compile_time: ${whole}.${frac} s exceeds the ${LIMIT} s limit")
endif()
