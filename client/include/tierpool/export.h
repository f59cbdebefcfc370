// What libtierpool exports: the library is built with hidden visibility (and its static parts
// with --exclude-libs), so only the classes and functions marked here are visible to programs;
// its copies of protobuf messages, fmt and JSON stay private and cannot collide with other
// copies in the same process (PyTorch, ONNX).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define TIERPOOL_EXPORT __attribute__((visibility("default")))
#else
#define TIERPOOL_EXPORT
#endif
