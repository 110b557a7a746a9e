# Sourced by scripts/test and scripts/sanitize: which tests run in which build. Each e2e file
# runs once, under AddressSanitizer where that stage runs it (it checks all a Release run does,
# and memory errors, leaks and UB besides), in build/ where ASan leaves it out or where its
# checks differ under a sanitizer (RELEASE_E2E). The gtests and the Python unit files run in
# both: they are cheap, and they check the Release build's own numbers against their references.

# AddressSanitizer leaves out these SmolLM2 runs (60-490 s each under ASan, ~10x Release, about
# 40 min of the first run together; the requantized goldens, test_dequantize's 14 files and
# test_structured_output's 105 sampled documents (10+ min) would add as much again): they check
# numbers (llama.cpp goldens, determinism, JSON validity, seeded sampling, speculation equals
# plain decoding) over code paths that the kept tests drive too (the forward pass on every ISA
# path, engine batching, preemption, sampling and draft verification, the CLI's tokenizer
# in-process through tokenizer_golden_test, grammar masks in engine_grammar_test, structured
# output's mapping and compilation in the gateway and request builder tests). Likewise Gemma 3
# 270M's greedy goldens, 16-chat e2e and KV tier restarts (the Gemma blocks run under ASan in
# test_tiny_families, its KV groups' tiers in test_kv_tiers's tiny gemma3) and
# test_gateway_tools (its parsers and grammars in output_parser_test and
# tool_call_grammar_test, the gateway's mapping in gateway_request_mapping_test). And
# test_default_model: scripts/serve's 1.1 GB Qwen2.5-Coder-1.5B, ~10 tokens/s in Release
# (qwen2 blocks in test_tiny_models, untagged Hermes calls in output_parser_test).
ASAN_EXCLUDE='^(Models/ForwardGoldenTest\.(GreedyContinuationsMatchLlamaCpp|'\
'ReferenceKernelLogitsMatchNumpyClosely)/SmolLM2.*|EngineSamplingTest\.(SeededRequestsResume'\
'AfterPreemptionWithTheSameTokens|SeededRequestIsTheSameAloneAndBatchedWithFifteenOthers|'\
'NSequencesShareThePromptBlocksAndFollowTheirSeedAndIndex|MinTokensKeepsEndOfGenerationAway)|'\
'EngineDeterminismTest\.DefaultModelBatchedEqualsGeneratePath|'\
'DeterminismTest\.AloneOrBatchedWholeOrChunkedAnyThreadCount|py\.test_tokenize_cli|'\
'SpecGreedyTest\.(NgramEqualsPlainAloneAndBatched|TargetAsItsOwnDraftModelIsAlwaysAccepted'\
'AndEqualsPlain|SeededSamplingDrawsThePlainTokens)|Types/RequantizedGoldenTest\..*|'\
'py\.test_dequantize|py\.test_structured_output|Layouts/Gemma3GoldenTest\..*|'\
'py\.test_gemma3_chat|py\.test_kv_tiers_gemma3|py\.test_gateway_tools|py\.test_default_model)$'

# e2e files that run in build/ as well: their memory-growth bounds are skipped or widened
# under a sanitizer's allocator (ASan holds 256 MiB of freed memory in quarantine).
RELEASE_E2E='^py\.test_(soak_short|adversarial|gateway_bad_inputs|gateway_http_hardening)$'

# build-dir: a ctest -E pattern of the e2e tests the ASan stage runs (build/'s ctest leaves them
# to it), or a pattern that matches nothing when there are none.
e2e_left_to_asan() {
  local names
  names=$(ctest --test-dir "$1" -N -L '^e2e$' | sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p' |
    grep -Ev "$ASAN_EXCLUDE" | grep -Ev "$RELEASE_E2E" | sed 's/\./\\./g' | paste -sd '|')
  echo "^(${names:-^})\$"
}
