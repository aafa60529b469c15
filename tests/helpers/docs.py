"""The fenced code blocks of README.md and docs/*.md, and how the tests read their info strings.

Every block says what it is in its info string (the word after the opening fence):

- ``python``: runs as written, on its own (fresh namespace, in a folder holding the files the
  docs name: ``model.onnx``, ``batch.onnx``); ``python continued``: in the namespace the block
  before it in the same file left.
- ``pycon``: a session (``>>>`` lines and the output they print), run by doctest with ``...``
  matching anything; ``pycon continued`` as above.
- ``sh``: command lines; every ``tir-adreno ...`` line parses with the CLI's own parser (its
  commands, flags and choices), upper-case placeholders (``MODEL``, ``DIR``, ``PROFILE``)
  replaced by examples and ``[optional parts]`` dropped.
- ``text``: not run (a diagram, a formula, a sample); ``text output:NAME``: output that
  ``tests/docs/test_code_blocks.py`` compares with what producer NAME prints now, numbers aside.
- ``python sketch``: Python that needs what a test cannot have (a tracker, a phone): not run,
  but its imports import and the ``module.name`` it uses exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT

#: The documents whose blocks the tests run (docs/upstream/ holds upstream's repros, run by tests/upstream/).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Info strings a block may have (language, role).
KINDS = {("python", ""), ("python", "continued"), ("python", "sketch"), ("pycon", ""), ("pycon", "continued"),
         ("sh", ""), ("text", ""), ("text", "output")}

_FENCE = re.compile(r"^(\s*)(```+)(.*)$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  #: of the opening fence, 1-based
    lang: str
    role: str  #: "", "continued", "sketch", "output"
    arg: str  #: what follows "output:" (the producer)
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, in order."""
    lines, found, i = doc.read_text().splitlines(), [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            indent, fence, info = m.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence)
            body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end])
            words = info.split()
            lang = words[0] if words else ""
            role, _, arg = (words[1] if len(words) > 1 else "").partition(":")
            found.append(Block(doc, i + 1, lang, role, arg, body + "\n"))
            i = end
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


#: Example values for the placeholders of command lines.
PLACEHOLDERS = {"MODEL": "model.onnx", "DIR": "dir", "PROFILE": "adreno", "FILE": "records.json", "TRACKER": "host",
                "HOST": "host", "D": "pocl", "N": "input"}


def command_lines(block: Block) -> list[list[str]]:
    """The ``tir-adreno`` commands of an ``sh`` block as argv lists (without ``tir-adreno``)."""
    return [words[1:] for words in _commands(block) if words[:1] == ["tir-adreno"]]


def scripts(block: Block) -> list[str]:
    """The repository scripts an ``sh`` block runs (``python benchmarks/zoo.py ...``)."""
    return [w for words in _commands(block) if words[:1] in (["python"], ["python3"]) for w in words[1:2] if w.endswith(".py")]


def _commands(block: Block) -> list[list[str]]:
    """Each command of an ``sh`` block as words: prompts, comments, ``[optional parts]``, leading
    ``VAR=value`` settings dropped, ``a && b`` split, placeholders replaced."""
    import shlex

    commands = []
    for line in block.text.splitlines():
        line = re.sub(r"^\$ ", "", line.strip())
        line = line.split(" #", 1)[0] if not line.startswith("#") else ""
        for command in re.sub(r"\[[^\]]*\]", "", line).split("&&"):
            words = shlex.split(command)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
                words = words[1:]
            commands.append([PLACEHOLDERS.get(w, w) for w in words])
    return commands


_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")


_TIME_UNIT = re.compile(r"\bN (?:ms|us|µs|s)\b")


def shape_of(text: str) -> str:
    """``text`` with every number written as N (times, errors and sizes change run to run), and a
    time's unit as T (a kernel prints microseconds on a fast device, milliseconds on a slow one)."""
    return _TIME_UNIT.sub("N T", _NUMBER.sub("N", text))


def matches(shown: str, produced: str) -> bool:
    """Whether the docs' ``shown`` output is what was ``produced``, numbers aside; ``...`` in
    ``shown`` stands for anything within its line, a line of only ``...`` for any lines."""
    parts = []
    for line in shape_of(shown).rstrip("\n").splitlines():
        if line.strip() == "...":
            parts.append(r"(?:.*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.fullmatch("".join(parts), shape_of(produced).rstrip("\n") + "\n") is not None


def output_block(name: str) -> Block:
    """The one ``text output:NAME`` block of the docs."""
    (block,) = [b for b in all_blocks() if b.role == "output" and b.arg == name]
    return block
