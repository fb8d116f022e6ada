"""The one YAML loader for the files gpulse reads (its config file, the web config).

    yaml.load(text, Loader=StrictLoader)

A safe loader (libyaml where present: PyYAML's own scanner takes quadratic time on
deeply nested flow collections) that also refuses

- duplicate keys: PyYAML would silently keep the last one (a second `alice:` would
  replace the first; Go's parser, which other exporters use, refuses them too);
- aliases that expand the document by more than MAX_ALIAS_EXPANSION values, or that
  refer to themselves. A ~1.4 KB "billion laughs" file composes to a few dozen nodes
  but expands to ~10^9 values; anything that walks it (validation, an error message)
  runs out of memory. The expansion is counted on the composed node graph, where an
  alias is a shared node, so the check costs one pass over the nodes actually written.

`read_text(path)` reads such a file capped at MAX_FILE_BYTES as UTF-8 text.

Errors are yaml.YAMLError with a line mark, so callers report them like any other
YAML problem. `shown()` is how a raw value may appear in a message: short, never
the str() of a whole structure.
"""
from __future__ import annotations

import os
import stat
from typing import Any

import yaml

# Values (scalars, lists, mappings) that aliases may add on top of those written.
MAX_ALIAS_EXPANSION = 10_000
# A config file is a few hundred bytes; refuse to read a huge one (or /dev/zero).
MAX_FILE_BYTES = 1 << 20


class FileTextError(Exception):
    """Why a YAML file could not be read as text; `oserror` tells an OS error apart."""

    def __init__(self, message: str, oserror: bool = False):
        super().__init__(message)
        self.oserror = oserror


def read_text(path: str) -> str:
    """The file as UTF-8 text, at most MAX_FILE_BYTES; FileTextError otherwise."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
        # forever (a start-up or SIGHUP reload that never returns)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise FileTextError(e.strerror or str(e), oserror=True) from None
    with os.fdopen(fd, "rb") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileTextError("not a regular file")
            data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise FileTextError(e.strerror or str(e), oserror=True) from None
    if len(data) > MAX_FILE_BYTES:
        raise FileTextError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileTextError(f"not UTF-8 text (byte {e.start})") from None


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader that refuses duplicate keys and alias bombs (see module doc)."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)


def _no_duplicates(loader: StrictLoader, node: yaml.MappingNode) -> dict:
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            k = (key_node.tag, key_node.value)
            if k in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key_node.value)}",
                                                        key_node.start_mark)
            seen.add(k)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Count the values the document expands to; refuse cycles and bombs.

    Iterative post-order over the node graph with a memo per node: each node is
    visited once however often it is aliased, and deep nesting cannot overflow the
    Python stack here."""
    size: dict[int, int] = {}          # node id -> expanded size (done)
    on_path: set[int] = set()          # nodes being expanded (a revisit is a cycle)
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        nid = id(node)
        if children_done:
            on_path.discard(nid)
            total = 1 + sum(size[id(c)] for c in _children(node))
            size[nid] = total
            if total - distinct > MAX_ALIAS_EXPANSION:
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand this document by more than {MAX_ALIAS_EXPANSION} values",
                    node.start_mark)
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise yaml.composer.ComposerError(None, None, "an alias refers to the node that contains it",
                                              node.start_mark)
        on_path.add(nid)
        distinct += 1
        stack.append((node, True))
        for c in _children(node):
            if id(c) in on_path:
                raise yaml.composer.ComposerError(None, None, "an alias refers to the node that contains it",
                                                  c.start_mark)
            if id(c) not in size:
                stack.append((c, False))


_KINDS = {dict: "a mapping", list: "a list", tuple: "a list", set: "a set"}


def shown(value: Any, width: int = 40) -> str:
    """A raw value as an error message may show it: a short repr of a scalar, the
    kind of a collection, the length of a huge number. Never the whole value."""
    if isinstance(value, (bool, float)) or value is None:
        return repr(value)
    if isinstance(value, int):
        if abs(value) < 10 ** 18:
            return repr(value)
        try:
            digits = len(str(abs(value)))
        except ValueError:          # past Python's int-to-str limit: estimate from the bits
            digits = value.bit_length() * 30103 // 100000 + 1
        return f"a {digits}-digit number"
    if isinstance(value, str):
        if len(value) <= width:
            return repr(value)
        return repr(value[:width]) + f"... ({len(value)} characters)"
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    return type(value).__name__


__all__ = ["StrictLoader", "MAX_ALIAS_EXPANSION", "shown"]
