"""The fenced shell commands of README.md and docs/*.md, and what they are checked against:
each flag a tokenmill program, script or benchmark is given must be in that program's --help
(taking a value where the command gives one, one of its choices where --help lists them), and
docs/api.md's flag tables must list exactly tokenmill-server's and tokenmill-gateway's flags."""

import functools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("TOKENMILL_BIN_DIR", REPO / "build" / "bin"))
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# First words of the lines that are commands; other lines of a fence are output or data.
EXTERNAL_PROGRAMS = {"curl", "grpcurl", "kubectl", "podman", "docker", "ninja", "cmake", "ctest",
                     "openssl", "git", "pip"}
WRAPPERS = {"nice", "nohup", "time", "exec"}
OUR_BINARIES = {"tokenmill-server", "tokenmill-gateway", "tokenmill-health", "tokenmill"}
# scripts/serve passes its arguments to tokenmill-server.
SCRIPT_FLAGS_OF = {"scripts/serve": "tokenmill-server"}
SEPARATORS = {"&&", "||", ";", "|", "&", ";;", "|&"}


@dataclass
class Command:
    doc: str       # path relative to the repository
    line: int      # where the command starts
    text: str      # the whole command line, continuations joined
    words: list = field(default_factory=list)  # the simple command's words, wrappers removed

    @property
    def where(self):
        return f"{self.doc}:{self.line}"


def fenced_blocks(text):
    """(language, line of the first body line, body) of each ``` fence."""
    for m in re.finditer(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M):
        yield m.group(1), text[:m.start()].count("\n") + 2, m.group(2)


def logical_lines(body, first_line):
    """(line number, text) with backslash continuations and open quotes joined."""
    pending, start = "", None
    for number, line in enumerate(body.splitlines(), first_line):
        if start is None:
            start = number
        pending += line + "\n"
        if line.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the string goes on
            continue
        yield start, pending.replace("\\\n", " ")
        pending, start = "", None


def simple_commands(line):
    """The words of each simple command of a shell line (split at &&, ;, | and &)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for token in lexer:
        if token in SEPARATORS or token.startswith("<<"):
            if words:
                yield words
            words = []
            if token.startswith("<<"):  # a here-document: its body is data
                return
        else:
            words.append(token)
    if words:
        yield words


def program_words(words):
    """The words from the program on: assignments, wrappers, flock, timeout, a Python
    interpreter running a file and shell keywords removed; None when it is no command."""
    while words:
        first = words[0]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", first) or first in WRAPPERS or first in ("do", "then"):
            words = words[1:]
        elif first == "flock" or first == "timeout":
            words = words[2:]
        elif first.endswith("with_priority.sh"):
            words = words[1:]
        elif re.fullmatch(r"(\S*/)?python3?", first) and len(words) > 1 and words[1] != "-m":
            words = words[1:]
        elif first in ("for", "done", "if", "fi", "while"):
            return None
        else:
            break
    if not words:
        return None
    program = words[0].removeprefix("./")
    if program.endswith("/"):  # a folder in a diagram
        return None
    if program in EXTERNAL_PROGRAMS or re.fullmatch(r"(\S*/)?python3?", program):
        return words
    if "/" in program or program in OUR_BINARIES:
        return [program, *words[1:]]
    return None


def doc_commands(path, text=None):
    """Every command of the shell fences (no language, sh, bash, shell) of one document."""
    text = path.read_text() if text is None else text
    doc = str(path.relative_to(REPO)) if path.is_absolute() else str(path)
    commands = []
    for language, first_line, body in fenced_blocks(text):
        if language not in ("", "sh", "bash", "shell", "console"):
            continue
        for number, line in logical_lines(body, first_line):
            for words in simple_commands(line):
                words = program_words(words)
                if words:
                    commands.append(Command(doc, number, line.strip(), words))
    return commands


@dataclass
class Flags:
    """What a --help says of each long flag: whether it takes a value, and its choices."""
    takes_value: dict
    choices: dict


def parse_help(text):
    takes_value, choices = {}, {}
    for line in text.splitlines():
        m = re.match(r"\s+(?:-\w, ?|-\w,)?(--[\w-]+)(?:[ =]([A-Z][A-Z_0-9]*(?::\S*)?|\{[^}]*\}|"
                     r"\[[^\]]*\]))?", line)
        if not m:
            continue
        flag, value = m.group(1), m.group(2)
        takes_value[flag] = value is not None
        listed = re.search(r"\{([^}]*)\}", value or "")
        if listed:
            choices[flag] = set(listed.group(1).split(","))
    return Flags(takes_value, choices)


@functools.lru_cache(maxsize=None)
def help_of(*argv):
    """The --help of a program; a Python file runs under this interpreter."""
    if argv[0].endswith(".py"):
        argv = (sys.executable, *argv)
    result = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60,
                            cwd=REPO)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} --help failed: {result.stderr[-2000:]}")
    return parse_help(result.stdout)


def binary_path(program):
    """build/bin/NAME (or a bare NAME of ours) in the binaries under test."""
    name = program.rsplit("/", 1)[-1]
    return BIN_DIR / name


def is_cli11(path):
    """Whether a binary has CLI11's --help (others would run instead of printing help)."""
    return path.exists() and b"Print this help message and exit" in path.read_bytes()


def flag_errors(words, flags, program):
    """What is wrong with the flags in `words` for a program whose --help says `flags`."""
    errors = []
    i = 1
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--") or word == "--":
            continue
        flag, has_equals, value = word.partition("=")
        if flag not in flags.takes_value:
            errors.append(f"{program}: {flag} is not in its --help")
            continue
        if not flags.takes_value[flag]:
            if has_equals:
                errors.append(f"{program}: {flag} takes no value, given {value!r}")
            continue
        if not has_equals:
            if i >= len(words) or words[i].startswith("--"):
                errors.append(f"{program}: {flag} needs a value")
                continue
            value = words[i]
            i += 1
        allowed = flags.choices.get(flag)
        literal = not re.search(r"[$A-Z]", value) or value in (allowed or ())
        if allowed and literal and value not in allowed:
            errors.append(f"{program}: {flag} {value}: not one of {sorted(allowed)}")
    return errors


def check_command(command):
    """(errors, note): the command's flag errors, and what was checked, for the test's log."""
    words = command.words
    program = words[0]
    name = program.rsplit("/", 1)[-1]
    if program in EXTERNAL_PROGRAMS or re.fullmatch(r"(\S*/)?python3?", program):
        missing = [w for w in words[1:] if re.fullmatch(r"(docker|deploy|bench|scripts|proto|"
                                                        r"tests|docs)/[\w./-]*", w)
                   and not (REPO / w).exists()]
        return [f"{program}: {w} does not exist" for w in missing], (
            f"{program} is not ours: its repository paths checked")
    if program.startswith("build/bin/") or program in OUR_BINARIES:
        path = binary_path(program)
        if not path.exists():
            return [f"{program} is not built in {BIN_DIR}"], ""
        if not is_cli11(path):
            return [], f"{name} has no --help: not checked"
        argv = [str(path)]
        if name == "tokenmill" and len(words) > 1 and not words[1].startswith("-"):
            argv.append(words[1])  # the subcommand's own flags
        return flag_errors(words, help_of(*argv), name), f"{name} --help"
    if program in SCRIPT_FLAGS_OF:
        target = SCRIPT_FLAGS_OF[program]
        return (flag_errors(words, help_of(str(binary_path(target))), program),
                f"{program}: its arguments against {target} --help")
    if program.startswith("$") or program.startswith(".venv/"):
        return [], f"{program} is not ours: not checked"
    path = REPO / program
    if not (REPO / program.split("/")[0]).exists():
        return [], f"{program} is made by an earlier step (not in the repository): not checked"
    if not path.exists():
        return [f"{program} does not exist"], ""
    if program.endswith(".py") and "argparse" in path.read_text():
        try:
            return flag_errors(words, help_of(program), program), f"{program} --help"
        except AssertionError as e:  # a benchmark whose packages the test venv lacks
            if "ModuleNotFoundError" not in str(e):
                raise
    source = path.read_text(errors="replace")
    unknown = [w.partition("=")[0] for w in words[1:]
               if w.startswith("--") and w.partition("=")[0] not in source]
    return ([f"{program}: {flag} is not in its source" for flag in unknown],
            f"{program}: flags looked up in its source")


def flag_table(text, heading):
    """The flags in the first column of the table under `heading`, with the table's line."""
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    if section is None:
        raise AssertionError(f"no section '## {heading}'")
    flags = set()
    for row in re.findall(r"^\| ([^|]*) \|", section.group(1), re.M):
        flags.update(re.findall(r"`(--[\w-]+)`", row))
    return flags


def table_errors(text, heading, binary):
    """Flags the table lists that --help lacks, and --help's flags the table lacks."""
    documented = flag_table(text, heading)
    actual = set(help_of(str(binary_path(binary))).takes_value) - {"--help"}
    return ([f"'{heading}' lists {f}, which {binary} --help lacks" for f in
             sorted(documented - actual)] +
            [f"{binary} has {f}, which '{heading}' does not list" for f in
             sorted(actual - documented)])
