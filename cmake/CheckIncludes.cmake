# CheckIncludes.cmake: the include-direction check. Every `#include "..."` line of the tracked
# C/C++/CUDA files must point the way the layering allows (docs/architecture.md). Run:
#   cmake -DKILN_SOURCE_ROOT=/path/to/kiln -P cmake/CheckIncludes.cmake
# It prints one line per violation,
#   <file>:<line>: <folder> may not include "<header>" (<rule>)
# and fails (FATAL_ERROR, non-zero exit) when there is any. CTest runs it as `include_direction`
# (tests/CMakeLists.txt); .ci/check runs it before every commit.
#
# Headers spelled with <...> are system or third-party headers and are never checked. Ours are
# spelled from the repository root ("cache/blob_store.h"), except "kiln/..." (the public client
# headers, the kernels' device headers and op contracts, the generated protobuf headers) and
# the rendered "kiln_config.cuh".

# --- The rules: edit here ------------------------------------------------------------------

# Places: which class a path belongs to, for including files and for headers spelled from the
# root alike. "<regex> <class>"; the first match wins; the matched text names the folder in
# messages. A path that matches none is in an unknown folder: a violation, so that a new
# folder gets its line here.
set(KILN_INCLUDE_PLACES
  "^cache/                                   cache"
  "^kiln_base/                               kiln_base"
  "^cmake/include/kiln_base/                 kiln_base"
  "^kernels/(include|src)/                   kernels_device"
  "^kernels/(jit|ops)/                       kernels_host"
  "^kernels/traces/                          kernels_traces"
  "^server/                                  server"
  # proto_shared: the hand-written pieces both sides of the wire agree on (proto/CMakeLists.txt).
  "^proto/(endpoint|tactic_blocklist|tuning_checks|tuning_environment|spec_list|bundle_layout|origin_word|crc32c|local_fetch)\\.h$ proto_shared"
  "^proto/                                   proto"
  "^client/include/                          client_public"
  "^client/core/                             client_core"
  "^client/diag/                             client_diag"
  "^client/ops/                              client_ops"
  "^client/comm/                             client_comm"
  "^client/embedded/                         client_embedded"
  "^client/cli/                              client_cli"
  "^client/ranks/                            client_ranks"
  "^tests/support/                           tests_support"
  "^tests/                                   tests"
  "^bench/                                   bench"
)

# Headers spelled from elsewhere than the repository root, with the class they resolve to
# (decided in kiln_classify_header below, by the file they name):
#   kiln_public    "kiln/<name>.h", "kiln/ops/<name>.h": client/include/kiln; "kiln/version.h"
#                  (generated from client/include/kiln/version.h.in) and "kiln/ops/all.h"
#                  (generated from the family headers by client/CMakeLists.txt)
#   kiln_contract  "kiln/<family>/<name>_contract.h": kernels/include/kiln/<family>/
#   kiln_device    any other "kiln/..." under kernels/include/kiln
#   kiln_proto     "kiln/v1/<name>.pb.h" or ".grpc.pb.h" of proto/kiln/v1/<name>.proto
#   grpc_health    "grpc/health/v1/<name>.pb.h" or ".grpc.pb.h" of proto/grpc/health/v1/
#   kiln_config    "kiln_config.cuh", rendered per specialization into the generated workspace
# Third-party headers that are spelled with quotes by their own convention; never checked.
set(KILN_INCLUDE_EXTERNAL "^absl/")

# Rules: "<class of the including file> : <classes it may include> : <the rule, for messages>".
# `*` allows everything; `client_*` every client class.
set(KILN_INCLUDE_RULES
  "cache          : cache kiln_base : cache/ includes only cache/ and kiln_base/"
  "kiln_base      : kiln_base : kiln_base/ includes only kiln_base/"
  "kernels_host   : kernels_host kernels_traces kiln_contract kiln_base : kernels/ host code includes only kernels/ host code, the op contracts and kiln_base/"
  "kernels_traces : kernels_host kernels_traces kiln_contract kiln_base : kernels/ host code includes only kernels/ host code, the op contracts and kiln_base/"
  "kernels_device : kiln_device kiln_contract kiln_config : device code includes only \"kiln/...\" of kernels/include and \"kiln_config.cuh\""
  "server         : server cache kernels_host kernels_traces proto proto_shared kiln_base kiln_proto grpc_health : server/ includes server/, cache/, kernels/ host code, proto/, kiln_base/ and the generated protobuf headers"
  "proto          : proto proto_shared kiln_proto : proto/ includes only proto/ and \"kiln/v1/...\""
  "proto_shared   : proto proto_shared kiln_proto : proto/ includes only proto/ and \"kiln/v1/...\""
  "client_public  : kiln_public : public headers include only public \"kiln/...\" headers and <dlpack/dlpack.h>"
  "client_core    : client_core kiln_public kiln_proto proto_shared : client core includes only core, the public headers, \"kiln/v1/...\" and the shared headers of proto/"
  "client_diag    : client_core client_diag kiln_public kiln_proto proto_shared kiln_contract : client diag includes only core, diag, the public headers, \"kiln/v1/...\", the shared headers of proto/ and the op contracts"
  "client_ops     : client_core client_diag client_ops kiln_public kiln_proto proto_shared kiln_contract : client ops includes only core, diag, ops, the public headers, \"kiln/v1/...\", the shared headers of proto/ and the op contracts"
  "client_comm    : client_core client_diag client_ops client_comm kiln_public kiln_proto proto_shared kiln_contract : client comm includes only core, diag, ops, comm, the public headers, \"kiln/v1/...\", the shared headers of proto/ and the op contracts"
  "client_embedded : client_core kiln_public kiln_proto proto_shared server cache kernels_host kiln_base : the embedded engine includes only core, the public headers, \"kiln/v1/...\", the shared headers of proto/ and the engine's side: server/, cache/, kernels/ host code and kiln_base/"
  "client_cli     : client_core client_diag client_ops client_comm client_cli kiln_public kiln_proto proto_shared : the kiln CLI includes only core, diag, ops, comm, cli, the public headers, \"kiln/v1/...\" and the shared headers of proto/"
  "client_ranks   : client_ranks kiln_public : kiln-launch includes only its own folder and the public headers"
  "tests          : * : tests/ may include anything"
  "tests_support  : * : tests/ may include anything"
  "bench          : bench client_* kiln_public kernels_traces tests_support kiln_contract proto_shared : bench/ includes only bench/, client/, the public headers, kernels/traces/, tests/support/, the op contracts and the shared headers of proto/ (the spec-list format)"
)

# Known violations allowed for now: "<file> <header>", printed on every run; an entry that no
# longer occurs fails the check (delete its line). Add none: fix the include instead.
set(KILN_INCLUDE_KNOWN)

# File kinds checked: tracked files with these extensions.
set(KILN_INCLUDE_EXTENSIONS h hh hpp hxx c cc cpp cxx cu cuh inc)

# --- The check ------------------------------------------------------------------------------

cmake_minimum_required(VERSION 3.25)
if(NOT KILN_SOURCE_ROOT)
  get_filename_component(KILN_SOURCE_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
if(NOT EXISTS "${KILN_SOURCE_ROOT}/cmake/CheckIncludes.cmake")
  message(FATAL_ERROR "KILN_SOURCE_ROOT=${KILN_SOURCE_ROOT} is not a Kiln checkout")
endif()

# place_of(<path> <out class> <out folder>): the class of a path and the folder that decided it.
function(kiln_place_of path out_class out_folder)
  foreach(entry IN LISTS KILN_INCLUDE_PLACES)
    string(REGEX MATCH "^([^ ]+) +([^ ]+)$" _ "${entry}")
    set(regex "${CMAKE_MATCH_1}")
    set(class "${CMAKE_MATCH_2}")
    if(path MATCHES "${regex}")
      string(REGEX REPLACE "/$" "" folder "${CMAKE_MATCH_0}")
      set(${out_class} "${class}" PARENT_SCOPE)
      set(${out_folder} "${folder}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  string(REGEX MATCH "^[^/]*" top "${path}")
  set(${out_class} "" PARENT_SCOPE)
  set(${out_folder} "${top}" PARENT_SCOPE)
endfunction()

# kiln_classify_header(<header> <includer class> <out class> <out why>): what a quoted include
# names. Out class: a class, "external" (never checked) or "" (unknown; out why says why).
function(kiln_classify_header header includer out_class out_why)
  set(${out_why} "" PARENT_SCOPE)
  foreach(regex IN LISTS KILN_INCLUDE_EXTERNAL)
    if(header MATCHES "${regex}")
      set(${out_class} "external" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(header STREQUAL "kiln_config.cuh")
    set(${out_class} "kiln_config" PARENT_SCOPE)
    return()
  endif()
  if(header MATCHES "^kiln/v1/([^/.]+)\\.(grpc\\.)?pb\\.h$")
    if(EXISTS "${KILN_SOURCE_ROOT}/proto/kiln/v1/${CMAKE_MATCH_1}.proto")
      set(${out_class} "kiln_proto" PARENT_SCOPE)
    else()
      set(${out_class} "" PARENT_SCOPE)
      set(${out_why} "no proto/kiln/v1/${CMAKE_MATCH_1}.proto generates it" PARENT_SCOPE)
    endif()
    return()
  endif()
  if(header MATCHES "^grpc/health/v1/([^/.]+)\\.(grpc\\.)?pb\\.h$")
    if(EXISTS "${KILN_SOURCE_ROOT}/proto/grpc/health/v1/${CMAKE_MATCH_1}.proto")
      set(${out_class} "grpc_health" PARENT_SCOPE)
    else()
      set(${out_class} "" PARENT_SCOPE)
      set(${out_why} "no proto/grpc/health/v1/${CMAKE_MATCH_1}.proto generates it" PARENT_SCOPE)
    endif()
    return()
  endif()
  # kiln/ops/all.h: generated by client/CMakeLists.txt (every family header of kiln/ops/).
  if(header STREQUAL "kiln/ops/all.h" AND NOT includer STREQUAL "kernels_device")
    set(${out_class} "kiln_public" PARENT_SCOPE)
    return()
  endif()
  if(header MATCHES "^kiln/")
    set(public "${KILN_SOURCE_ROOT}/client/include/${header}")
    set(device "${KILN_SOURCE_ROOT}/kernels/include/${header}")
    # Device code finds "kiln/..." only in kernels/include (NVRTC is given nothing else).
    if(NOT includer STREQUAL "kernels_device" AND (EXISTS "${public}" OR EXISTS "${public}.in"))
      set(${out_class} "kiln_public" PARENT_SCOPE)
    elseif(EXISTS "${device}" AND header MATCHES "^kiln/[^/]+/[^/]+_contract\\.h$")
      set(${out_class} "kiln_contract" PARENT_SCOPE)
    elseif(EXISTS "${device}")
      set(${out_class} "kiln_device" PARENT_SCOPE)
    elseif(EXISTS "${public}" OR EXISTS "${public}.in")
      set(${out_class} "kiln_public" PARENT_SCOPE)
    else()
      set(${out_class} "" PARENT_SCOPE)
      set(${out_why} "no such header under client/include or kernels/include" PARENT_SCOPE)
    endif()
    return()
  endif()
  kiln_place_of("${header}" class folder)
  set(${out_class} "${class}" PARENT_SCOPE)
  if(class STREQUAL "")
    if(header MATCHES "/")
      set(${out_why} "\"${folder}/\" is not a folder of the include rules: headers are spelled from the repository root, and a new folder gets a line in cmake/CheckIncludes.cmake" PARENT_SCOPE)
    else()
      set(${out_why} "headers are spelled from the repository root" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# The rule of each including class: allowed classes and text.
foreach(entry IN LISTS KILN_INCLUDE_RULES)
  string(REGEX MATCH "^([^ :]+) *: *([^:]*[^ :]) *: *(.+)$" _ "${entry}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "cmake/CheckIncludes.cmake: cannot read the rule \"${entry}\"")
  endif()
  string(REPLACE " " ";" allowed "${CMAKE_MATCH_2}")
  list(REMOVE_ITEM allowed "")
  set(allowed_${CMAKE_MATCH_1} "${allowed}")
  set(rule_${CMAKE_MATCH_1} "${CMAKE_MATCH_3}")
endforeach()

# The files: tracked ones when this is a git checkout, else every file outside build folders.
set(patterns)
foreach(ext IN LISTS KILN_INCLUDE_EXTENSIONS)
  list(APPEND patterns "*.${ext}")
endforeach()
find_program(KILN_GIT git)
set(files_text "")
set(git_rc 1)
if(KILN_GIT AND EXISTS "${KILN_SOURCE_ROOT}/.git")
  execute_process(COMMAND "${KILN_GIT}" -C "${KILN_SOURCE_ROOT}" ls-files -- ${patterns}
    OUTPUT_VARIABLE files_text RESULT_VARIABLE git_rc ERROR_QUIET)
endif()
if(git_rc EQUAL 0)
  string(REPLACE "\n" ";" files "${files_text}")
else()
  file(GLOB_RECURSE files RELATIVE "${KILN_SOURCE_ROOT}" LIST_DIRECTORIES false ${patterns})
  list(FILTER files EXCLUDE REGEX "^(build[^/]*|out|\\.git|\\.gpu|\\.whl)/")
endif()
list(REMOVE_ITEM files "")

set(violations)
set(known)
set(known_seen)
set(checked 0)
foreach(file IN LISTS files)
  if(NOT EXISTS "${KILN_SOURCE_ROOT}/${file}")
    continue()  # deleted in the work tree, not yet in the index
  endif()
  file(READ "${KILN_SOURCE_ROOT}/${file}" content)
  if(NOT content MATCHES "#[ \t]*include[ \t]*\"")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  kiln_place_of("${file}" from from_folder)
  # One list element per line: characters that CMake lists treat specially are replaced first
  # (they never matter in an include line).
  string(REPLACE "\\" "/" content "${content}")
  string(REPLACE ";" "," content "${content}")
  string(REPLACE "[" "(" content "${content}")
  string(REPLACE "]" ")" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\"")
      continue()
    endif()
    set(header "${CMAKE_MATCH_1}")
    if(from STREQUAL "")
      list(APPEND violations "${file}:${line_number}: ${from_folder} may not include \"${header}\" (\"${from_folder}/\" is not a folder of the include rules: add it to cmake/CheckIncludes.cmake)")
      continue()
    endif()
    set(allowed "${allowed_${from}}")
    if("*" IN_LIST allowed)
      continue()
    endif()
    kiln_classify_header("${header}" "${from}" to why)
    if(to STREQUAL "external")
      continue()
    endif()
    if(to STREQUAL "")
      list(APPEND violations "${file}:${line_number}: ${from_folder} may not include \"${header}\" (${why})")
      continue()
    endif()
    set(ok FALSE)
    foreach(a IN LISTS allowed)
      if(a STREQUAL to)
        set(ok TRUE)
      elseif(a MATCHES "^(.*)\\*$")
        string(FIND "${to}" "${CMAKE_MATCH_1}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endif()
      if(ok)
        break()
      endif()
    endforeach()
    if(NOT ok)
      set(message "${file}:${line_number}: ${from_folder} may not include \"${header}\" (${rule_${from}})")
      if("${file} ${header}" IN_LIST KILN_INCLUDE_KNOWN)
        list(APPEND known_seen "${file} ${header}")
        list(APPEND known "${message}")
      else()
        list(APPEND violations "${message}")
      endif()
    endif()
  endforeach()
endforeach()

foreach(entry IN LISTS KILN_INCLUDE_KNOWN)
  if(NOT entry IN_LIST known_seen)
    string(REPLACE " " ": \"" where "${entry}")
    list(APPEND violations "${where}\": no longer included, delete its line from KILN_INCLUDE_KNOWN in cmake/CheckIncludes.cmake")
  endif()
endforeach()
foreach(line IN LISTS known)
  message("known, allowed until fixed: ${line}")
endforeach()

list(LENGTH violations count)
if(count GREATER 0)
  string(REPLACE ";" "\n" text "${violations}")
  message("${text}")
  message(FATAL_ERROR "${count} include problem(s) (rules: cmake/CheckIncludes.cmake, layering: docs/architecture.md)")
endif()
list(LENGTH known known_count)
message(STATUS "include direction: ${checked} files with quoted includes, no new violation (${known_count} known)")
