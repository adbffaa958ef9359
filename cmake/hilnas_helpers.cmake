# hilnas_cc_library(NAME name SRCS ... DEPS ... [TORCH] [PLAIN_SRCS ...])
# hilnas_cc_test(NAME name SRCS ... DEPS ... [TORCH] [LABELS ...])
# Modelled on Abseil's absl_cc_library / absl_cc_test. TORCH reuses the one
# libtorch precompiled header so <torch/torch.h> is parsed once per build.
# PLAIN_SRCS are a TORCH library's files that include no libtorch header:
# they compile without it (hilnas_plain_sources).

# Marks files of a target that reuses the libtorch PCH as not needing it.
# The PCH is not free where nothing uses it: GCC loads it and instantiates
# libtorch's pending templates in every file it is forced into, so a file
# that includes no libtorch header took 15-18 s with it and 3-6 s without
# (device_agent/environment.cc 15.0 s against 3.3 s, one core). A marked
# file leaves its unity batch (where the PCH is paid once for all) and pays a
# compiler start and its other headers alone: worth it only for files with
# light headers (tools/commands' plain files, CLI11 and gRPC, took 10-19 s
# each that way, more than they saved, and stay in their batches). A file
# listed here that later includes libtorch still builds, only slower.
function(hilnas_plain_sources)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON
                              SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

function(hilnas_cc_library)
  cmake_parse_arguments(A "TORCH" "NAME" "SRCS;DEPS;PLAIN_SRCS" ${ARGN})
  add_library(${A_NAME} STATIC ${A_SRCS} ${A_PLAIN_SRCS})
  target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
  if(A_TORCH)
    target_link_libraries(${A_NAME} PUBLIC ${TORCH_LIBRARIES})
    target_precompile_headers(${A_NAME} REUSE_FROM hilnas_torch_pch)
    # Its libtorch files compile in unity batches (PLAIN_SRCS stay apart):
    # each file alone pays the PCH's load and GCC's instantiation of
    # torch/torch.h's pending templates, ~13 s before a line of its own.
    # A folder may set another batch size after this.
    set_target_properties(${A_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 6)
    if(A_PLAIN_SRCS)
      hilnas_plain_sources(${A_PLAIN_SRCS})
    endif()
  endif()
endfunction()

function(hilnas_cc_test)
  if(HILNAS_AGENT_ONLY)
    return()  # the agent-only cross build has no test framework
  endif()
  # SERIAL: ctest runs it alone (it times things, or loads the CPUs).
  cmake_parse_arguments(A "TORCH;SERIAL" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} hilnas_testing GTest::gmock GTest::gtest_main)
  if(HILNAS_SANITIZE STREQUAL "thread")
    # Lets TSan see Debian's uninstrumented absl::Mutex (util/tsan_absl_mutex.cc).
    # Not in a unity batch: its anonymous-namespace names stay its own, and
    # a change to it rebuilds one small file per test, not the tests.
    target_sources(${A_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/util/tsan_absl_mutex.cc)
    set_source_files_properties(${CMAKE_SOURCE_DIR}/util/tsan_absl_mutex.cc PROPERTIES
                                SKIP_UNITY_BUILD_INCLUSION ON)
    target_link_libraries(${A_NAME} PRIVATE ${CMAKE_DL_LIBS})
  endif()
  # A test file is glue around the libraries, which keep their -O3, and
  # test files are about 40% of a clean build's compiling: they compile at
  # -O0, against a libtorch PCH of their own built at -O0
  # (hilnas_torch_test_pch, 36 s once). Eight test files compiled one
  # after another at each level took 105.9 s at -O0 against 129.3 s at
  # -O1 (model/gemv_test.cc 10.3 against 14.6 s); all 79 in a -j2 build
  # 853 s against 1050 s (the -O1 figure from an earlier day's build). The
  # tests' run times stayed put (the 515 that ran in both: 850 against
  # 898 s summed). Tests time nothing themselves; bench/ does, at -O3.
  target_compile_options(${A_NAME} PRIVATE -O0)
  # A folder's unit tests are one executable whose files compile together in
  # batches (a unity build): a file that includes libtorch pays ~13 s before
  # its first line of its own (an empty file against the -O0 PCH: 8.4 s of
  # GCC instantiating the header's pending templates, 4.7 s of loading the
  # 570 MB PCH). model/'s decoder, checkpoint, kv_prediction and slim tests
  # took 65.9 s one after another, 24.7 s as one unit. A batch is one
  # translation unit: two files' helpers of one name in their anonymous
  # namespaces collide (the compiler names both); name them apart.
  list(LENGTH A_SRCS n_srcs)
  if(n_srcs GREATER 1)
    set_target_properties(${A_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  if(A_TORCH)
    target_link_libraries(${A_NAME} PRIVATE ${TORCH_LIBRARIES})
    target_precompile_headers(${A_NAME} REUSE_FROM hilnas_torch_test_pch)
  endif()
  # Tests find the source tree (configs/) and the built binaries through these.
  target_compile_definitions(${A_NAME} PRIVATE HILNAS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                               HILNAS_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # Each build tree's tests keep their files in its own folder, not /tmp:
  # two checkouts testing at once on one machine (a clean clone beside a
  # working tree) would otherwise share /tmp/hilnas_agents_<test> and stop
  # each other's coordinators (gtest's TempDir() reads TEST_TMPDIR).
  set(test_tmpdir "${CMAKE_BINARY_DIR}/test-tmp")
  file(MAKE_DIRECTORY "${test_tmpdir}")
  set(props ENVIRONMENT "TEST_TMPDIR=${test_tmpdir}")
  if(A_LABELS)
    list(APPEND props LABELS "${A_LABELS}")
  endif()
  if(A_SERIAL)
    list(APPEND props RUN_SERIAL TRUE)
  endif()
  # A unit-test executable is one ctest test, its cases in one process: a
  # process that loads libtorch spends about 1.2 s starting (Debian's
  # libtorch_cpu pulls in 336 libraries, OpenCV and FFmpeg among them, and
  # registers its operators) and more in its first products and huge-page
  # buffers. The 35 such files held 298 cases: one process each summed 685 s
  # in a clean run's ctest; each file whole took 80 s on two cores (run one
  # case with `build/model/model_test --gtest_filter=DecoderTest.X`). The process
  # tests (label process) stay one ctest test a case: their cases are long,
  # start processes of their own, and ctest spreads them over the cores.
  # Sanitizer builds stay a case a test too: scripts/test --sanitize thread
  # picks its cases by name.
  if("process" IN_LIST A_LABELS OR HILNAS_SANITIZE)
    gtest_discover_tests(${A_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
  else()
    # --gtest_brief: a failing case's lines are all such a run prints, so
    # a CI log cut to its head and tail still shows them (155 passing
    # model/ cases hid the one that failed in the middle of one).
    add_test(NAME ${A_NAME} COMMAND ${A_NAME} --gtest_brief=1)
    set_tests_properties(${A_NAME} PROPERTIES ${props})
  endif()
endfunction()

if(NOT HILNAS_AGENT_ONLY)
  include(GoogleTest)
endif()
