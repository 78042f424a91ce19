"""Reading a user's YAML without trusting it: size, alias bombs, duplicate keys, and line numbers.

``yaml.safe_load`` alone builds no objects from tags, but it still accepts a billion-laughs alias
bomb (cheap to build, ruinous to walk), silently keeps the last of two duplicate keys, and forgets
where each value came from. :func:`read_documents` fixes all three and turns every YAML problem
into a :class:`YamlError` with a line number::

    docs = read_documents(text, source="slo.yaml")
    docs[0].data                      # the plain Python value
    docs[0].lines[("slos", 0, "objective")]   # 12, the line that value sits on
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# A spec is a page or two of YAML; these limits are generous for that and small for an attacker.
MAX_BYTES = 1 << 20
MAX_NODES = 100_000  # after expanding aliases: what walking the data would cost
MAX_DOCUMENTS = 100
# Python refuses to read decimal integers past 4300 digits, and a huge hexadecimal one fails
# wherever it is printed or converted; a spec's numbers are a few digits long.
MAX_INTEGER_CHARACTERS = 100
MERGE_TAG = "tag:yaml.org,2002:merge"

# Where a value sits in a document: mapping keys and list indexes from the root.
Path_ = tuple[str | int, ...]


class YamlError(Exception):
    """The input is not usable YAML; the message says where (``source:line:column: what``)."""


@dataclass(frozen=True)
class Document:
    data: object
    lines: dict[Path_, int] = field(default_factory=dict)  # path → 1-based line of its value


class _Loader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys instead of keeping the last one."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicate key {key!r} (first on line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        if len(node.value) > MAX_INTEGER_CHARACTERS:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"an integer {len(node.value)} characters long (at most "
                f"{MAX_INTEGER_CHARACTERS})",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def _describe(exc: yaml.YAMLError, source: str) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or exc.context or "invalid YAML"
        return f"{source}:{mark.line + 1}:{mark.column + 1}: {problem}"
    return f"{source}: {exc}"


class _Walker:
    """Counts nodes as if aliases were expanded and records the line of every path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.count = 0
        self.lines: dict[Path_, int] = {}
        self._open: set[int] = set()

    def walk(self, node: Node, path: Path_, line: int | None = None) -> None:
        """Walk ``node`` found at ``path``; ``line`` is where its key sits, if it has one."""
        self.count += 1
        if self.count > MAX_NODES:
            raise YamlError(
                f"{self.source}: more than {MAX_NODES} values once aliases are expanded "
                "(an alias bomb?)"
            )
        self.lines.setdefault(path, line or node.start_mark.line + 1)
        if id(node) in self._open:
            raise YamlError(f"{self.source}:{node.start_mark.line + 1}: an alias refers to itself")
        self._open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                for index, item in enumerate(node.value):
                    self.walk(item, (*path, index))
            elif isinstance(node, MappingNode):
                self._walk_pairs(node, path)
        finally:
            self._open.discard(id(node))

    def _walk_pairs(self, node: MappingNode, path: Path_) -> None:
        for key, value in node.value:
            if key.tag == MERGE_TAG:
                # Merged keys land in this mapping, so they get this mapping's paths.
                merged = value.value if isinstance(value, SequenceNode) else [value]
                for item in merged:
                    self.count += 1
                    if isinstance(item, MappingNode):
                        self._walk_pairs(item, path)
                continue
            if not isinstance(key, ScalarNode):
                self.walk(key, (*path, "<complex key>"))  # counted; the constructor rejects it
                continue
            self.walk(value, (*path, key.value), key.start_mark.line + 1)


def read_documents(text: str, source: str = "<memory>") -> list[Document]:
    """Every YAML document in ``text``, checked against the limits above."""
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_BYTES:
        raise YamlError(f"{source}: larger than {MAX_BYTES} bytes; a spec is never that big")
    try:
        loader = _Loader(text)  # reads ahead: a control character fails here already
    except yaml.YAMLError as exc:
        raise YamlError(_describe(exc, source)) from exc
    try:
        nodes: list[Node] = []
        while loader.check_node():
            if len(nodes) >= MAX_DOCUMENTS:
                raise YamlError(f"{source}: more than {MAX_DOCUMENTS} YAML documents")
            node = loader.get_node()
            if node is not None:
                nodes.append(node)
        documents = []
        for node in nodes:
            walker = _Walker(source)
            walker.walk(node, ())
            documents.append(Document(loader.construct_document(node), walker.lines))
        return documents
    except yaml.YAMLError as exc:
        raise YamlError(_describe(exc, source)) from exc
    except RecursionError as exc:
        raise YamlError(f"{source}: nested too deeply") from exc
    finally:
        loader.dispose()


def read_file(path: str | Path) -> tuple[str, str]:
    """``(text, source)`` of a spec file, refusing huge, binary or unreadable files clearly."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_BYTES:
        raise YamlError(f"{source}: larger than {MAX_BYTES} bytes; a spec is never that big")
    try:
        return raw.decode("utf-8"), source
    except UnicodeDecodeError as exc:
        raise YamlError(f"{source}: not UTF-8 text (byte {exc.start})") from exc
