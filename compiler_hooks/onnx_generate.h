// ONNX decoder exports -> generation schedules: a prefill and decodes, one import of the graph
// per call with its sequence dimensions set, spliced into one schedule whose KV cache (the
// graph's past* inputs and present* outputs) carries from each call to the next.
#pragma once

#include <string>

#include "compiler_hooks/onnx_importer.h"

namespace tierpool::hooks {

struct OnnxGenerateOptions {
  OnnxImportOptions import;        // batch, other symbolic dimensions, repeats
  std::int64_t prompt = 0;         // tokens in the prompt (>= 1)
  std::int64_t new_tokens = 0;     // decodes of one token each
  std::int64_t prefill_chunk = 0;  // prompt tokens per prefill call; 0: all at once
  bool decode_only = false;        // the prompt's cache exists at the start (def_step -1)
  std::int64_t max_calls = 4096;   // refuse bigger unrolls: each call is one import
};

// The graph's cache: inputs whose name contains "past", outputs whose name contains
// "present", paired in order (past_key_values.0.key with present.0.key). The past inputs'
// symbolic sequence dimension is the context so far; the token input's (the first integer
// input that is not past) the tokens of this call; any other symbolic dimension of a data
// input beyond the first (an attention mask's) is their sum unless --dim gives it. The Concat
// that grows the cache is timed as an in-place append of the new tokens, as serving engines do.
Result<prefetch::Schedule> GenerateFromOnnx(const std::string& path,
                                            const OnnxGenerateOptions& options);

}  // namespace tierpool::hooks
