# The installed package as a user meets it (run by CTest as `cmake -P`):
#  1. install the client component of the build tree into a fresh prefix;
#  2. check what was installed: library, public headers (free of gRPC, protobuf, abseil and
#     CUDA includes), CMake package files; and that the library exports only Kiln's API;
#  3. configure, build (-Werror) and run tests/client/consumer against that prefix, with a C
#     file that calls every C function the installed headers declare (every_c_function.py):
#     each must be defined (the link) and callable (it returns).
foreach(var KILN_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR EXPECTED_VERSION PYTHON)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
run("${CMAKE_COMMAND}" --install "${KILN_BUILD_DIR}" --prefix "${prefix}" --component kiln_client)

file(GLOB_RECURSE libs "${prefix}/lib*/libkiln_client.so*")
file(GLOB_RECURSE configs "${prefix}/lib*/cmake/kiln/kilnConfig.cmake")
file(GLOB_RECURSE versions "${prefix}/lib*/cmake/kiln/kilnConfigVersion.cmake")
if(NOT libs OR NOT configs OR NOT versions)
  message(FATAL_ERROR "incomplete install in ${prefix}: lib '${libs}', config '${configs}', version '${versions}'")
endif()
foreach(header kiln.h kiln.hpp status.h tensor_view.h ops.h kernel.h client.h version.h export.h)
  if(NOT EXISTS "${prefix}/include/kiln/${header}")
    message(FATAL_ERROR "missing installed header include/kiln/${header}")
  endif()
endforeach()
if(NOT EXISTS "${prefix}/bin/kiln")
  message(FATAL_ERROR "the kiln CLI was not installed into ${prefix}/bin")
endif()
file(GLOB headers "${prefix}/include/kiln/*")
foreach(header IN LISTS headers)
  file(STRINGS "${header}" includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    if(line MATCHES "grpc|google/protobuf|absl/|cuda\\.h|cuda_runtime|kiln/v1/")
      message(FATAL_ERROR "public header ${header} includes a private dependency: ${line}")
    endif()
  endforeach()
endforeach()

# Only the API is exported: C++ symbols of namespace kiln, the kiln_* C functions, and the
# std:: template code the API's inline functions instantiate.
find_program(NM nm)
if(NM)
  list(GET libs 0 lib)
  run("${NM}" -DC --defined-only "${lib}")
  string(REPLACE "\n" ";" symbols "${run_output}")
  foreach(line IN LISTS symbols)
    if(line MATCHES "google::|grpc|absl::|kiln::v1::|kiln::client::|kiln::detail::|[Cc]uda")
      message(FATAL_ERROR "libkiln_client exports an internal symbol: ${line}")
    endif()
  endforeach()
endif()

set(every "${WORK_DIR}/every_c_function.c")
run("${PYTHON}" "${CONSUMER_SOURCE_DIR}/every_c_function.py" "${prefix}/include" "${every}")
string(STRIP "${run_output}" declared)
string(REPLACE " " ";" declared "${declared}")
run("${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DKILN_EXPECTED_VERSION=${EXPECTED_VERSION}" "-DKILN_EVERY_C_FUNCTION=${every}")
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer does not build against the installed package. An \"undefined reference to "
                      "kiln_...\" names a C function that client/include/kiln declares and libkiln_client does not "
                      "define (or export): define it with its op (client/ops/<family>/<family>_ops.cpp, "
                      "docs/adding-a-kernel.md).\n${out}\n${err}")
endif()
run("${WORK_DIR}/build/consumer")
message(STATUS "${run_output}")
if(NOT run_output MATCHES "kiln consumer ok")
  message(FATAL_ERROR "the consumer did not finish: ${run_output}")
endif()
foreach(name IN LISTS declared)
  if(NOT run_output MATCHES "C ABI ${name}: ")
    message(FATAL_ERROR "the consumer did not call ${name}: ${run_output}")
  endif()
endforeach()
list(LENGTH declared count)
message(STATUS "every C function declared by the installed headers (${count}) is defined and callable")
file(REMOVE_RECURSE "${WORK_DIR}")
