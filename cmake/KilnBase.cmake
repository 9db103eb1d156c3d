# kiln_base: the header-only vocabulary every Kiln library may include (cmake/include/kiln_base/),
# today the absl::Status propagation macros. It lives with the build rather than in a component
# because cache/ and kernels/ depend on nothing of ours: a header they share cannot belong to
# either of them. Code includes it as "kiln_base/status_macros.h".
add_library(kiln_base INTERFACE)
target_include_directories(kiln_base INTERFACE "${KILN_SOURCE_ROOT}/cmake/include")
target_link_libraries(kiln_base INTERFACE absl::status absl::statusor)
