# Installs tierpool into a scratch prefix, then configures, builds and runs a consumer project
# that does find_package(tierpool) and links tierpool::client, as a trainer's build would.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install_consumer
  -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
  # Same sanitizer flags as the library, if any: an ASan library needs an ASan program.
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer configure failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer build failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
# No server runs here: the consumer must link, load and report UNAVAILABLE cleanly.
if(NOT rc EQUAL 0 OR NOT out MATCHES "UNAVAILABLE")
  message(FATAL_ERROR "consumer run failed (${rc}): ${out}")
endif()

# The same program built without CMake, from the installed pkg-config file.
execute_process(COMMAND env PKG_CONFIG_PATH=${WORK_DIR}/prefix/lib/pkgconfig
  pkg-config --cflags --libs tierpool OUTPUT_VARIABLE pc_flags RESULT_VARIABLE rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT pc_flags MATCHES "-ltierpool")
  message(FATAL_ERROR "pkg-config tierpool failed (${rc}): ${pc_flags}")
endif()
separate_arguments(pc_list UNIX_COMMAND "${pc_flags}")
separate_arguments(cxx_list UNIX_COMMAND "${CXX_FLAGS} ${LINKER_FLAGS}")
# pkg-config's flags alone: no rpath or LD_LIBRARY_PATH of the test's own (the program must find
# the library where it is installed, as a user's build on a machine that never ran ldconfig).
execute_process(COMMAND c++ -std=c++20 ${cxx_list} ${SOURCE_DIR}/tests/install_consumer/main.cc
  ${pc_list} -o ${WORK_DIR}/consumer-pc RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building with pkg-config's flags failed: ${rc}")
endif()
execute_process(COMMAND env -u LD_LIBRARY_PATH ${WORK_DIR}/consumer-pc RESULT_VARIABLE rc
  OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "UNAVAILABLE")
  message(FATAL_ERROR "pkg-config consumer run failed (${rc}): ${out}")
endif()

# The installed programs run from the prefix with no LD_LIBRARY_PATH (RPATH $ORIGIN/../lib),
# and the prefix can move.
file(RENAME ${WORK_DIR}/prefix ${WORK_DIR}/moved-prefix)
foreach(program tierpool tierpoold)
  execute_process(COMMAND env -u LD_LIBRARY_PATH ${WORK_DIR}/moved-prefix/bin/${program} --version
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "^${program} [0-9]")
    message(FATAL_ERROR "${program} --version from a moved prefix failed (${rc}): ${out}")
  endif()
endforeach()
# The PyTorch hook's scripts, installed together, import each other from the prefix alone (the
# installed tool runs them where no source tree is; --help needs every module-level import).
foreach(script tierpool_torch_schedule.py tierpool_calibrate.py)
  execute_process(COMMAND /usr/bin/python3 -E ${WORK_DIR}/moved-prefix/share/tierpool/${script} --help
    WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage:")
    message(FATAL_ERROR "the installed ${script} does not start (${rc}): ${out}")
  endif()
endforeach()
if(PYTHON_DIR)  # the extension finds libtierpool relative to itself too
  execute_process(COMMAND env -u LD_LIBRARY_PATH PYTHONPATH=${WORK_DIR}/moved-prefix/${PYTHON_DIR}
    /usr/bin/python3 -c "import tierpool, sys; sys.stdout.write(tierpool.__file__)"
    WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "moved-prefix")
    message(FATAL_ERROR "import tierpool from a moved prefix failed (${rc}): ${out}")
  endif()
endif()
