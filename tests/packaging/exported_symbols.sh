#!/usr/bin/env bash
# libtierpool exports its public API (tierpool/client.h classes, the tp_* C ABI) and nothing of
# what it links privately: no protobuf messages, transport, fmt, spdlog or JSON symbols that
# could collide with other copies in a trainer's process (PyTorch and ONNX bring their own).
#   tests/packaging/exported_symbols.sh path/to/libtierpool.so
set -euo pipefail
lib=$1
symbols=$(nm -DC --defined-only "$lib")
# Symbols that are themselves internal (a public one may mention an internal type in its
# signature, as Client's constructor from its core does).
internal='^[0-9a-f]+ [A-Za-z] ((typeinfo( name)?|vtable|VTT|guard variable) for )?'
internal+='(tierpool::(wire|transport|detail|schedule)::|google::|fmt::|spdlog::|nlohmann::|XXH)'
bad=$(echo "$symbols" | grep -E "$internal" || true)
if [ -n "$bad" ]; then
  echo "libtierpool exports internals ($(echo "$bad" | wc -l) symbols), for example:"
  echo "$bad" | head -20
  exit 1
fi
echo "$symbols" | grep -Eq " T tp_connect$" || { echo "tp_connect not exported"; exit 1; }
echo "$symbols" | grep -q "tierpool::Client::Connect" ||
  { echo "tierpool::Client::Connect not exported"; exit 1; }
echo "exports $(echo "$symbols" | wc -l) symbols, no internals"
