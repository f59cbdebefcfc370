// The entry point every fuzz target defines (libFuzzer's). With clang's -fsanitize=fuzzer it is
// driven by libFuzzer; in ordinary builds by fuzz_driver.cc, which replays a corpus and a fixed
// number of deterministic mutations of it (the short run CI does).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
