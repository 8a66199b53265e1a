"""YAML from outside the process, read within bounds: no recursive alias, no alias fan-out.

``yaml.safe_load`` builds no object of an arbitrary class, but it still follows aliases as they
are written: ``&a {x: *a}`` gives a mapping that contains itself, which the first walk over it
ends in a ``RecursionError``, and nine levels of ten aliases each stand for a billion values, which
a walk takes hours over. :func:`load` composes the document, measures what its aliases expand to
(each node once, remembered), and refuses a recursive alias or more than :data:`MAX_VALUES`
values with a :class:`ValueError` of one line, before anything is built. No TensorFlow here.
"""
from __future__ import annotations

from typing import IO, Any, Dict, Set, Union

import yaml

MAX_VALUES = 100_000  # values a document may stand for, its aliases expanded: far more than any config holds


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that checks the composed document (:func:`_check`) before it builds it."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check(node)
        return self.construct_document(node)


def _check(root: yaml.Node) -> None:
    """Raises ValueError when a node contains itself through an alias, or the document expands past the bound."""
    sizes: Dict[int, int] = {}
    open_nodes: Set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ValueError("a YAML alias refers to a value that contains it (a recursive alias); write the value"
                             " out instead")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
        open_nodes.discard(key)
        if total > MAX_VALUES:
            raise ValueError(f"its YAML aliases expand to more than {MAX_VALUES} values; write the values out or"
                             " use fewer aliases")
        sizes[key] = total
        return total

    size(root)


def load(stream: Union[str, bytes, IO[str], IO[bytes]]) -> Any:
    """The one YAML document in ``stream``, as ``yaml.safe_load`` gives it, within this module's bounds.

    Raises:
        yaml.YAMLError: not valid YAML.
        ValueError: a recursive alias, aliases that expand past :data:`MAX_VALUES`, text that is not UTF-8.
        RecursionError: nesting deeper than the interpreter's stack.
    """
    return yaml.load(stream, Loader=_BoundedLoader)  # noqa: S506  a SafeLoader: no arbitrary object is built
