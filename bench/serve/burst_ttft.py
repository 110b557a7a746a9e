"""Time to first token of N requests sent together, straight to tokenmill-server over gRPC,
all behind one new shared prompt (nobody has computed it) and each with its own question:
a burst of users behind a new system prompt. Prints each request's TTFT in ms.

  .venv/bin/python bench/serve/burst_ttft.py 127.0.0.1:50051 --words 2100 --users 8
"""
import argparse
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
import grpc  # noqa: E402
from server_harness import pb2, pb2_grpc  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("--words", type=int, default=700, help="words of the shared prompt")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words = WORDS.split()
    prefix = " ".join(rng.choice(words) for _ in range(args.words))
    questions = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(args.users)]
    stub = pb2_grpc.InferenceStub(grpc.insecure_channel(args.address))
    ttft = [None] * args.users

    def user(i):
        start = time.perf_counter()
        for response in stub.Generate(pb2.GenerateRequest(
                text=prefix + " " + questions[i], max_tokens=8, ignore_eos=True)):
            if response.token_ids and ttft[i] is None:
                ttft[i] = round((time.perf_counter() - start) * 1e3)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(args.users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("TTFT ms:", ttft)


if __name__ == "__main__":
    main()
