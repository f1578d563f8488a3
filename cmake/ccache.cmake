# Use ccache when present. The sloppiness lets ccache cache translation units that use the
# precompiled torch header (ccache manual, "Precompiled headers").
find_program(MEMSCOPE_CCACHE ccache)
if(MEMSCOPE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      ${MEMSCOPE_CCACHE})
  message(STATUS "memscope: using ccache ${MEMSCOPE_CCACHE}")
endif()
