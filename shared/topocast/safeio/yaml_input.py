"""The one way topocast reads YAML: safe tags, a size cap and an alias-expanded node cap.

``yaml.safe_load`` is safe against code execution but not against size: an
alias may point at a collection of aliases, so 474 bytes can describe 10^9
values. The loader shares the objects, but every consumer that walks the
result (``str(v)``, pydantic, ``json.dumps``) pays the expanded size: 50 s and
2.5 GB for one model file. Here each document is *composed* (nodes, aliases
still shared), its expanded size is counted with memoisation (cheap, linear in
the text) and only then constructed. Recursive aliases and too-deep nesting are
refused the same way.
"""

from __future__ import annotations

from typing import Any

import yaml

from topocast.errors import TopocastError
from topocast.safeio.limits import MAX_JSON_DEPTH, MAX_YAML_BYTES, MAX_YAML_NODES, check_size

__all__ = ["load_yaml", "load_yaml_all"]

_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expanded(root: yaml.Node, what: str, error: type[TopocastError], max_nodes: int, max_depth: int) -> None:
    """Count the nodes ``root`` stands for with every alias expanded; refuse cycles and deep nesting."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 0)]
    while stack:
        node, finished, depth = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > max_nodes:
                raise error(f"{what}: expands to more than {max_nodes} YAML values (aliases counted expanded)")
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise error(f"{what}: a YAML alias refers to a collection containing itself")
        if depth > max_depth:
            raise error(f"{what}: nested deeper than {max_depth} levels")
        on_path.add(key)
        stack.append((node, True, depth))
        stack.extend((c, False, depth + 1) for c in _children(node) if id(c) not in size)


def _documents(text: str | bytes, what: str, error: type[TopocastError], max_nodes: int, *, single: bool) -> list[Any]:
    check_size(len(text), MAX_YAML_BYTES, what, error)
    loader = _Loader(text)
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if single and docs:
                raise error(f"{what}: expected one YAML document, found several")
            _check_expanded(node, what, error, max_nodes, MAX_JSON_DEPTH)
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        raise error(f"{what}: not valid YAML ({' '.join(str(exc).split())})") from None
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:
        raise error(f"{what}: not usable YAML ({type(exc).__name__}: {str(exc)[:120]})") from None
    finally:
        loader.dispose()
    return docs


def load_yaml(text: str | bytes, what: str, error: type[TopocastError], *, max_nodes: int = MAX_YAML_NODES) -> Any:
    """``yaml.safe_load`` with the caps; failures raise ``error("<what>: ...")``. Empty text is None."""
    docs = _documents(text, what, error, max_nodes, single=True)
    return docs[0] if docs else None


def load_yaml_all(
    text: str | bytes, what: str, error: type[TopocastError], *, max_nodes: int = MAX_YAML_NODES
) -> list[Any]:
    """``yaml.safe_load_all`` with the caps, as a list; the node cap applies per document."""
    return _documents(text, what, error, max_nodes, single=False)
