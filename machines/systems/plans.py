"""Checking a transfer plan before anything is written: every problem at once.

A plan is a list of node mappings (``PLAN_KEYS``); ``validate_plan`` returns the plan as
it is stored (every key present) and the list of problems, so that the engine can refuse
a bad plan with all of them in one ``PlanError`` and write nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PLAN_KEYS = ("name", "kind", "has_side_effect", "executor", "after")
REQUIRED_KEYS = ("name", "kind", "has_side_effect", "executor")


def validate_plan(
    request_id: object,
    plan: object,
    kinds: Sequence[str],
    executors: Mapping[str, object],
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the plan as stored, its problems); the plan is only meaningful without problems."""
    problems = _id_problems(request_id)
    if isinstance(plan, str | bytes) or not isinstance(plan, Sequence):
        return [], [*problems, "the plan must be a list of node mappings"]
    if not plan:
        return [], [*problems, "the plan is empty; it needs nodes"]
    nodes: list[dict[str, Any]] = []
    for index, node in enumerate(plan):
        found = _node_problems(index, node, kinds, executors)
        problems += found
        if not found:
            nodes.append({"after": [], **node})
    if not problems:
        problems = _graph_problems(nodes)
    return [{key: node[key] for key in PLAN_KEYS} for node in nodes], problems


def _id_problems(request_id: object) -> list[str]:
    if not isinstance(request_id, str) or not request_id or "/" in request_id:
        return [f"request id {request_id!r} must be a non-empty string without '/'"]
    return []


def _node_problems(
    index: int, node: object, kinds: Sequence[str], executors: Mapping[str, object]
) -> list[str]:
    """What is wrong with one node entry on its own (its edges are checked later)."""
    if not isinstance(node, Mapping):
        return [f"node #{index} must be a mapping, not {type(node).__name__}"]
    name = node.get("name")
    label = f"node '{name}'" if isinstance(name, str) else f"node #{index}"
    problems = [
        f"{label}: unknown key '{key}'; keys: {', '.join(PLAN_KEYS)}"
        for key in node
        if key not in PLAN_KEYS
    ]
    problems += [f"{label}: missing '{key}'" for key in REQUIRED_KEYS if key not in node]
    if "name" in node and (not isinstance(name, str) or not name or "/" in name):
        problems.append(f"{label}: name must be a non-empty string without '/'; got {name!r}")
    if "kind" in node and node["kind"] not in kinds:
        problems.append(f"{label}: kind {node['kind']!r} is not one of {', '.join(kinds)}")
    if "has_side_effect" in node and not isinstance(node["has_side_effect"], bool):
        problems.append(f"{label}: has_side_effect must be true or false")
    if "executor" in node and node["executor"] not in executors:
        known = ", ".join(executors) or "none"
        problems.append(f"{label}: unknown executor {node['executor']!r}; executors: {known}")
    after = node.get("after", [])
    if not isinstance(after, list) or not all(isinstance(p, str) for p in after):
        problems.append(f"{label}: 'after' must be a list of node names")
    elif len(set(after)) != len(after):
        problems.append(f"{label}: 'after' names a predecessor twice")
    return problems


def _graph_problems(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Duplicate names, dangling edges, then cycles."""
    names = [n["name"] for n in nodes]
    problems = [
        f"node '{n}' is defined {names.count(n)} times"
        for n in dict.fromkeys(names)
        if names.count(n) > 1
    ]
    known = set(names)
    for node in nodes:
        problems += [
            f"node '{node['name']}' runs after '{p}', which is not in the plan"
            for p in node["after"]
            if p not in known
        ]
    if problems:
        return problems
    cycle = _find_cycle({n["name"]: n["after"] for n in nodes})
    return [f"the plan has a cycle: {' -> '.join(cycle)}"] if cycle else []


def _find_cycle(after: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the predecessor graph as a closed path of names, or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name][::-1]
        if name in done:
            return None
        for predecessor in after[name]:
            found = visit(predecessor, [*path, name])
            if found:
                return found
        done.add(name)
        return None

    for name in after:
        found = visit(name, [])
        if found:
            return found
    return None


def node_data(node: Mapping[str, Any], plan: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a node row keeps of its plan entry, with its successors worked out."""
    return {
        "name": node["name"],
        "has_side_effect": node["has_side_effect"],
        "executor": node["executor"],
        "predecessors": list(node["after"]),
        "successors": [n["name"] for n in plan if node["name"] in n["after"]],
    }
