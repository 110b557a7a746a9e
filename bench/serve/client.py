"""One streaming OpenAI completion request (POST /v1/completions, SSE), timed as
`vllm bench serve` times it: a chunk counts when it carries a choice, even with empty text
(a special token), except a final chunk that only carries the finish reason."""
import json
import time

import aiohttp

from metrics import RequestTrace


def completion_body(model, spec, seed, ignore_eos):
    """The request body. ignore_eos: "param" sends vLLM's and tokenmill's `ignore_eos`;
    "logit-bias:ID" bans token ID instead (llama_cpp.server has no ignore_eos)."""
    body = {"model": model, "prompt": spec.prompt, "max_tokens": spec.max_tokens,
            "temperature": 0.0, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    if ignore_eos == "param":
        body["ignore_eos"] = True
    elif ignore_eos.startswith("logit-bias:"):
        body["logit_bias"] = {ignore_eos.split(":", 1)[1]: -100.0}
    elif ignore_eos != "off":
        raise ValueError(f"--ignore-eos {ignore_eos}: use param, logit-bias:TOKEN_ID or off")
    return body


async def stream_completion(session, url, body, spec, on_chunk=None):
    """Sends one request; returns its RequestTrace (success False with the error on failure).
    on_chunk(trace) runs after each counted chunk."""
    trace = RequestTrace(send_time=time.perf_counter(), prompt_tokens=spec.prompt_tokens,
                         max_tokens=spec.max_tokens, tag=spec.tag)
    usage_tokens = None
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                trace.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return trace
            async for raw in response.content:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                event = json.loads(data)
                if event.get("error"):
                    trace.error = json.dumps(event["error"])[:200]
                    return trace
                if event.get("usage"):
                    usage_tokens = event["usage"].get("completion_tokens")
                    trace.prompt_tokens = event["usage"].get("prompt_tokens") or spec.prompt_tokens
                choices = event.get("choices") or []
                if not choices:
                    continue
                choice = choices[0]
                if not choice.get("text") and choice.get("finish_reason"):
                    continue  # the end marker, no token
                trace.chunk_times.append(now)
                if on_chunk is not None:
                    on_chunk(trace)
    except (aiohttp.ClientError, ValueError) as e:
        trace.error = f"{type(e).__name__}: {e}"
        return trace
    if not trace.chunk_times:
        trace.error = "the stream ended without a token"
        return trace
    trace.output_tokens = usage_tokens if usage_tokens is not None else len(trace.chunk_times)
    trace.success = True
    return trace
