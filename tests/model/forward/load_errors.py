"""What `tokenmill generate` says when it refuses a model file at load: the tests of hostile
and unsupported metadata hold its message to the key or tensor to fix."""
import os
import subprocess

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")


def load_error(path):
    """The stderr of a refused load of `path` (a failed exit, no crash)."""
    result = subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", "1,2,3",
                             "--max-tokens", "1"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "terminate" not in result.stderr
    return result.stderr
