"""Where a field of a YAML document is: the line of the node a pydantic error path (or a SpecError's) points
at, so a file's errors can say ``fleet.yaml:12: nodes[1].count: ...``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic.alias_generators import to_camel


def line_of(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the deepest node of ``loc`` that the document has (a missing key: its mapping)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _child(node: yaml.Node, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    if isinstance(node, yaml.MappingNode):
        names = {str(part), to_camel(str(part))}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value in names:
                found: yaml.Node = value
                return found
    return None


def path_text(loc: Sequence[str | int]) -> str:
    """``nodes[1].mig.config`` for ("nodes", 1, "mig", "config")."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def located(path: Path, text: str, loc: Sequence[str | int], message: str) -> str:
    """``path:line: field: message`` (the line left out when the document has none)."""
    line = line_of(text, loc)
    where = f"{path}:{line}" if line is not None else str(path)
    field = path_text(loc)
    return f"{where}: {field}: {message}" if field else f"{where}: {message}"
