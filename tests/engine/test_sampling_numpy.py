"""The sampler's processors and draws against an independent NumPy implementation.

tests/engine/sampling_probe (C++) prints the Sampler's processed distribution for one logits
row, draws with seeds 0..N-1 and the first draw's logprobs; here NumPy computes the same
formulas (penalties -> min_tokens mask -> logit_bias -> temperature -> top-k -> top-p ->
min-p, as vLLM/HF define them) and a chi-square test checks the draws follow it.
"""
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

PROBE = Path(os.environ.get("TOKENMILL_BIN_DIR", "build/bin")) / "tests" / "sampling_probe"
VOCAB = 200


def run_probe(logits, params, prompt=(), output=(), eos=(), num_draws=0):
    request = {"logits": [float(x) for x in logits], "params": params, "prompt": list(prompt),
               "output": list(output), "eos": list(eos), "num_draws": num_draws}
    done = subprocess.run([str(PROBE)], input=json.dumps(request), capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def reference_probs(logits, params, prompt=(), output=(), eos=()):
    """The processed distribution, written from the formulas (float32 logits, float64 probs)."""
    x = np.array(logits, dtype=np.float32)
    rep = np.float32(params.get("repetition_penalty", 1.0))
    if rep != 1.0:
        seen = np.unique(np.array(list(prompt) + list(output), dtype=np.int64))
        x[seen] = np.where(x[seen] > 0, x[seen] / rep, x[seen] * rep)
    counts = np.bincount(np.array(list(output), dtype=np.int64), minlength=len(x))
    freq = np.float32(params.get("frequency_penalty", 0.0))
    pres = np.float32(params.get("presence_penalty", 0.0))
    hit = counts > 0
    x[hit] -= freq * counts[hit].astype(np.float32) + pres
    if len(output) < params.get("min_tokens", 0):
        masked = list(params.get("stop_token_ids", []))
        if not params.get("ignore_eos", False):
            masked += list(eos)
        x[masked] = -np.inf
    for token, bias in params.get("logit_bias", []):
        x[token] += np.float32(bias)
    t = params.get("temperature", 0.0)
    if t < 1e-5:
        p = np.zeros(len(x))
        p[int(np.argmax(x))] = 1.0
        return p
    z = x.astype(np.float64)
    finite = np.isfinite(z)
    p = np.zeros(len(z))
    p[finite] = np.exp((z[finite] - z[finite].max()) / t)
    p /= p.sum()
    k = params.get("top_k", 0)
    if 0 < k < len(x):
        kth = np.sort(x)[::-1][k - 1]
        p[x < kth] = 0.0
    top_p = params.get("top_p", 1.0)
    if top_p < 1.0:
        order = np.lexsort((np.arange(len(p)), -p))  # probability descending, then id
        q = p[order] / p.sum()
        before = np.concatenate([[0.0], np.cumsum(q)[:-1]])
        p[order[before >= top_p]] = 0.0
    min_p = params.get("min_p", 0.0)
    if min_p > 0:
        p[p < min_p * p.max()] = 0.0
    return p / p.sum()


def chi_square_threshold(df, z=4.753):
    """Upper quantile of chi-square(df) at p = 1e-6 (Wilson-Hilferty; z is N(0,1)'s)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi_square(draws, probs):
    counts = np.bincount(np.array(draws), minlength=len(probs))
    assert counts[probs == 0].sum() == 0, "drew a token the distribution excludes"
    expected = probs * len(draws)
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a small remainder into the smallest bin
        obs, exp = obs[:-1], exp[:-1]
        obs[-1] += counts[~big].sum()
        exp[-1] += expected[~big].sum()
    stat = float(((obs - exp) ** 2 / exp).sum())
    return stat, len(obs) - 1


@pytest.fixture(scope="module")
def row():
    rng = np.random.default_rng(1234)
    return (rng.standard_normal(VOCAB) * 2.0).astype(np.float32)


PROMPT = [3, 5, 5, 9, 150]
OUTPUT = [5, 7, 7, 7, 11, 199]

CASES = {
    "temperature": {"temperature": 0.7},
    "hot": {"temperature": 1.8},
    "top_k": {"temperature": 1.0, "top_k": 12},
    "top_p": {"temperature": 0.9, "top_p": 0.8},
    "min_p": {"temperature": 1.0, "min_p": 0.05},
    "all_truncations": {"temperature": 1.3, "top_k": 40, "top_p": 0.9, "min_p": 0.02},
    "repetition": {"temperature": 1.0, "repetition_penalty": 1.7},
    "presence_frequency": {"temperature": 1.0, "presence_penalty": 1.5,
                           "frequency_penalty": 0.6},
    "logit_bias": {"temperature": 1.0, "logit_bias": [[0, 5.0], [17, -100.0], [42, 3.25]]},
    "min_tokens": {"temperature": 1.0, "min_tokens": 10, "stop_token_ids": [8],
                   "logit_bias": [[8, 6.0], [2, 6.0]]},
    "min_tokens_reached": {"temperature": 1.0, "min_tokens": 3, "stop_token_ids": [8]},
    "everything": {"temperature": 0.8, "top_k": 50, "top_p": 0.95, "min_p": 0.01,
                   "repetition_penalty": 1.3, "presence_penalty": 0.4,
                   "frequency_penalty": 0.2, "logit_bias": [[1, 2.0]]},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_processed_distribution_matches_numpy(row, name):
    params = CASES[name]
    got = np.array(run_probe(row, params, PROMPT, OUTPUT, eos=[2])["probs"])
    want = reference_probs(row, params, PROMPT, OUTPUT, eos=[2])
    # The same tokens survive truncation (below 1e-30 a float32 probability may round to 0).
    np.testing.assert_array_equal(got[want == 0], 0)
    assert (got[want > 1e-30] > 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_greedy_is_argmax_of_processed_logits(row):
    params = {"temperature": 0.0, "repetition_penalty": 2.0, "logit_bias": [[3, 1.0]]}
    got = run_probe(row, params, PROMPT, OUTPUT, num_draws=5)
    want = reference_probs(row, params, PROMPT, OUTPUT)
    assert got["draws"] == [int(np.argmax(want))] * 5


@pytest.mark.parametrize("name", ["temperature", "top_k", "top_p", "everything"])
def test_draws_follow_the_distribution(row, name):
    """Chi-square at p = 1e-6 over 20000 draws (seeds 0..19999, so the verdict is fixed)."""
    params = CASES[name]
    got = run_probe(row, params, PROMPT, OUTPUT, num_draws=20000)
    want = reference_probs(row, params, PROMPT, OUTPUT)
    stat, df = chi_square(got["draws"], want)
    assert df >= 5
    assert stat < chi_square_threshold(df), f"chi-square {stat:.1f} with {df} dof"


def test_a_wrong_distribution_fails_the_chi_square(row):
    """The check has power: draws at temperature 0.7 do not pass as temperature 0.8."""
    got = run_probe(row, CASES["temperature"], PROMPT, OUTPUT, num_draws=20000)
    stat, df = chi_square(got["draws"], reference_probs(row, {"temperature": 0.8}))
    assert stat > chi_square_threshold(df)


def test_logprobs_are_numpy_log_softmax_of_the_raw_logits(row):
    params = {"temperature": 1.0, "top_logprobs": 5, "repetition_penalty": 1.5}
    got = run_probe(row, params, PROMPT, OUTPUT, num_draws=1)["logprobs"]
    z = row.astype(np.float64)
    log_softmax = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
    token, logprob = got["chosen"]
    assert logprob == pytest.approx(log_softmax[token], abs=1e-6)
    top = np.argsort(-log_softmax, kind="stable")[:5]
    assert [t for t, _ in got["top"]] == top.tolist()
    np.testing.assert_allclose([lp for _, lp in got["top"]], log_softmax[top], atol=1e-6)
