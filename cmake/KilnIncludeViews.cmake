# Include views: how the build enforces which folder may include which.
#
# Code spells our headers from the repository root ("client/core/loader/module_cache.h"), so
# every #include line shows the direction of a dependency. A target that had the repository
# root as an include folder could include anything, though. So the client's components do not
# get the root: each gets a view, a folder in the build tree holding symbolic links to its own
# sources at the same relative path, and a component sees only its own view and the views of
# what it links (target_link_libraries). An include that crosses a boundary the wrong way then
# fails to compile ("client/diag/call_trace.h: No such file"), and cmake/CheckIncludes.cmake
# (the CTest test include_direction) reports every such line of the tree with its rule.
#
#   kiln_include_view(VIEW [BASE DIR] PATHS PATH...)
#     A view named VIEW: for each PATH, VIEW/PATH links to <root>/DIR/PATH (DIR: default the
#     repository root). Sets KILN_VIEW_<VIEW> to the folder to give target_include_directories.
set(KILN_INCLUDE_VIEWS_DIR "${CMAKE_BINARY_DIR}/include-views")

function(kiln_include_view view)
  cmake_parse_arguments(ARG "" "BASE" "PATHS" ${ARGN})
  set(root "${KILN_INCLUDE_VIEWS_DIR}/${view}")
  set(base "${KILN_SOURCE_ROOT}")
  if(ARG_BASE)
    set(base "${KILN_SOURCE_ROOT}/${ARG_BASE}")
  endif()
  foreach(rel IN LISTS ARG_PATHS)
    set(link "${root}/${rel}")
    get_filename_component(parent "${link}" DIRECTORY)
    file(MAKE_DIRECTORY "${parent}")
    if(NOT IS_SYMLINK "${link}")
      file(REMOVE_RECURSE "${link}")
      file(CREATE_LINK "${base}/${rel}" "${link}" SYMBOLIC)
    endif()
  endforeach()
  set(KILN_VIEW_${view} "${root}" PARENT_SCOPE)
endfunction()
