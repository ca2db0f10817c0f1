"""Read the fenced ```bash and ```python blocks of a Markdown file and their docs-test directives.

A directive is an HTML comment (invisible in the rendered doc) on the lines right before a
fence; several may stack. The syntax is described in docs/README.md ("How docs are tested"):

    <!-- docs-test: skip REASON -->            not run; counted and listed with REASON
    <!-- docs-test: env NAME=VALUE -->         environment of this block
    <!-- docs-test: replace "OLD" "NEW" -->    run the block with OLD replaced by NEW (sizes)
    <!-- docs-test: expect "TEXT" -->          the block's output (stdout + stderr) contains TEXT
    <!-- docs-test: continue -->               python: same interpreter as the python block before
    <!-- docs-test: part NAME -->              this block starts part NAME of the document: a test
                                               of its own, in a folder of its own, that can run
                                               beside the document's other parts
    <!-- docs-test: setup                      code run first, hidden (same language as the block)
    ...
    -->
    <!-- docs-test: check                      code run after the block, hidden: asserts on what
    ...                                         the block made (files, values)
    -->
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

LANGUAGES = ("bash", "python")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([\w+-]*)")
_OPEN = "<!-- docs-test:"
_KINDS = ("skip", "env", "replace", "expect", "continue", "part", "setup", "check")
_PART_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class DirectiveError(ValueError):
    """A docs-test comment that is malformed or not followed by a fence."""


@dataclass
class Block:
    """One fenced code block and what its directives ask.

    Attributes:
        doc: the Markdown file.
        line: 1-based line of the opening fence.
        lang: ``bash``, ``python`` or any other info string.
        code: the block's text as the reader sees it.
        skip: the reason it is not run, or None.
        env: extra environment variables.
        replace: (old, new) pairs applied to ``code`` before it runs.
        expect: texts the output must contain.
        cont: a python block that runs in the interpreter of the python block before it.
        part: the name of the document part this block starts, or None (it belongs to the
            part of the block before it; the first part's name is "").
        setup: hidden code run before the block.
        check: hidden code run after the block.
    """

    doc: Path
    line: int
    lang: str
    code: str
    skip: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    replace: list[tuple[str, str]] = field(default_factory=list)
    expect: list[str] = field(default_factory=list)
    cont: bool = False
    part: str | None = None
    setup: str = ""
    check: str = ""

    @property
    def where(self) -> str:
        """``docs/x.md:LINE`` for messages."""
        return f"{self.doc.parent.name}/{self.doc.name}:{self.line}" if self.doc.parent.name == "docs" else (
            f"{self.doc.name}:{self.line}"
        )

    @property
    def runnable(self) -> bool:
        """A bash or python block that is not skipped."""
        return self.lang in LANGUAGES and self.skip is None

    def code_to_run(self) -> str:
        """The block's code with its replacements applied.

        Returns:
            The code.

        Raises:
            DirectiveError: a replacement whose old text is not in the block.
        """
        code = self.code
        for old, new in self.replace:
            if old not in code:
                raise DirectiveError(f"{self.where}: replace {old!r}: not in the block")
            code = code.replace(old, new)
        return code


def _apply(block: Block, kind: str, arg: str, body: str, where: str) -> None:
    if kind == "skip":
        if not arg:
            raise DirectiveError(f"{where}: skip needs a reason")
        block.skip = arg
    elif kind == "env":
        for word in shlex.split(arg):
            name, eq, value = word.partition("=")
            if not eq or not name:
                raise DirectiveError(f"{where}: env takes NAME=VALUE, got {word!r}")
            block.env[name] = value
    elif kind in ("replace", "expect"):
        words = shlex.split(arg)
        if kind == "replace":
            if len(words) != 2:
                raise DirectiveError(f'{where}: replace takes two quoted texts: "OLD" "NEW"')
            block.replace.append((words[0], words[1]))
        else:
            if len(words) != 1:
                raise DirectiveError(f'{where}: expect takes one quoted text: "TEXT"')
            block.expect.append(words[0])
    elif kind == "continue":
        block.cont = True
    elif kind == "part":
        if not _PART_NAME.fullmatch(arg):
            raise DirectiveError(f"{where}: part takes one name of lower-case letters, digits and '-', got {arg!r}")
        block.part = arg
    elif kind == "setup":
        block.setup += body
    elif kind == "check":
        block.check += body


def read_blocks(doc: Path) -> list[Block]:
    """Every fenced block of ``doc``, with its directives.

    Args:
        doc: a Markdown file.

    Returns:
        The blocks in document order (all languages; :attr:`Block.runnable` picks the ones to run).

    Raises:
        DirectiveError: a malformed directive, one not followed by a fence, or an unclosed fence.
    """
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[str, str, str, str]] = []  # (kind, arg, body, where)
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{doc.name}:{i + 1}"
        m = _FENCE.match(line)
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
            start = i
            body: list[str] = []
            i += 1
            while i < len(lines) and not (
                lines[i].strip().startswith(fence) and lines[i].strip().strip(fence[0]) == ""
            ):
                text = lines[i]
                body.append(text[indent:] if text[:indent].strip() == "" else text.lstrip())
                i += 1
            if i >= len(lines):
                raise DirectiveError(f"{doc.name}:{start + 1}: fence never closed")
            block = Block(doc, start + 1, lang, "\n".join(body) + "\n")
            for kind, arg, text, at in pending:
                _apply(block, kind, arg, text, at)
            pending = []
            if block.cont and lang != "python":
                raise DirectiveError(f"{where}: continue is for python blocks")
            if block.part is not None and (block.cont or block.part in {b.part for b in blocks}):
                raise DirectiveError(f"{where}: part {block.part!r} is named twice, or on a continued block")
            blocks.append(block)
            i += 1
            continue
        stripped = line.strip()
        if stripped.startswith(_OPEN):
            rest = stripped[len(_OPEN):].strip()
            kind, _, arg = rest.partition(" ")
            if kind.endswith("-->"):
                kind, arg = kind[:-3], "-->"
            if kind not in _KINDS:
                raise DirectiveError(f"{where}: unknown docs-test directive {kind!r} (one of {', '.join(_KINDS)})")
            text = ""
            if kind in ("setup", "check"):
                if arg.strip() != "":
                    raise DirectiveError(f"{where}: {kind}: the code starts on the next line, the comment ends with -->")
                j = i + 1
                while j < len(lines) and lines[j].strip() != "-->":
                    j += 1
                if j >= len(lines):
                    raise DirectiveError(f"{where}: {kind} comment never closed (a line with --> alone)")
                text = textwrap.dedent("\n".join(lines[i + 1:j]) + "\n")
                i = j
                arg = ""
            else:
                if not arg.endswith("-->"):
                    raise DirectiveError(f"{where}: a docs-test directive fits on one line and ends with -->")
                arg = arg[:-3].strip()
            pending.append((kind, arg, text, where))
            i += 1
            continue
        if pending and stripped:
            raise DirectiveError(f"{pending[0][3]}: docs-test directive not followed by a code fence")
        i += 1
    if pending:
        raise DirectiveError(f"{pending[0][3]}: docs-test directive not followed by a code fence")
    return blocks


def parts(blocks: list[Block]) -> dict[str, list[Block]]:
    """The document's blocks by part, in order: "" for the blocks before the first ``part``.

    Args:
        blocks: a document's blocks, as :func:`read_blocks` returns them.

    Returns:
        Part name -> its blocks (the first part only when it has runnable blocks or is the only one).
    """
    out: dict[str, list[Block]] = {"": []}
    current = ""
    for b in blocks:
        if b.part is not None:
            current = b.part
            out[current] = []
        out[current].append(b)
    if len(out) > 1 and not any(b.runnable for b in out[""]):
        del out[""]
    return out
