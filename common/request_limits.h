// What one generation request may ask for, the same at every edge: the gateway's HTTP APIs
// refuse past these with a 400 and the server's gRPC (engine/request_validation.h) with
// INVALID_ARGUMENT, so a client meets one limit whichever door it takes.
#pragma once

namespace tokenmill {

// Sequences generated from one prompt (`n`): each holds KV blocks and a seat in the batch,
// so one request cannot take the machine.
inline constexpr int kMaxSequencesPerRequest = 16;

// Prompts in one completions request (the gateway sends one gRPC call per prompt).
inline constexpr int kMaxPromptsPerRequest = 64;

// Sequences one HTTP request fans out to over its prompts (prompts × n): the server's default
// --max-num-seqs, so that one request alone cannot queue more than a batch.
inline constexpr int kMaxSequencesPerBatchRequest = 256;

// Inputs of one embeddings request (each is a request in the engine): as many as a batch.
inline constexpr int kMaxEmbedInputs = kMaxSequencesPerBatchRequest;

}  // namespace tokenmill
