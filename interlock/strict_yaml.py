"""YAML read strictly, for the files a person writes and another person reviews (the mandate, the shard map).

A key written twice is refused: PyYAML keeps the last silently, so a reviewer could read one value while
another applies (a merchant assigned to two shards, two `max_minor`s). Every problem names the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml


class YamlProblem(ValueError):
    """What is wrong with the text, already located: `source:line: ...`. Callers re-raise it as their own error."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlProblem(f"{self.name}:{line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The document's root node (for mapping a field back to its line) and its data; None, None when empty."""
    loader = _Loader(text)
    loader.name = source
    try:
        root = loader.get_single_node()
        return root, loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise YamlProblem(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
