"""Checking a transfer plan before anything is written: every problem at once.

A plan is a list of node mappings (``PLAN_KEYS``); ``validate_plan`` returns the plan as
it is stored (every key present) and the list of problems, so that the engine can refuse
a bad plan with all of them in one ``PlanError`` and write nothing.

A plan is user input of any size and shape, so the check is linear in its size, never
recursive (a long chain or cycle cannot exhaust the stack), reads every value only after
checking its type (an unhashable or hostile value is a problem line, not a ``TypeError``)
and names values by a short safe description.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from machines.runtime.history import TransitionEvent
from machines.spec.jsonvalue import describe
from machines.store.records import Row

PLAN_KEYS = ("name", "kind", "has_side_effect", "executor", "after")
REQUIRED_KEYS = ("name", "kind", "has_side_effect", "executor")

MAX_PLAN_NODES = 100_000
"""A larger plan is refused before its nodes are read. Checking is linear, but each node
is a row written in the submit's one transaction, the whole plan is stored as one JSON
value in the request row (about 10 MB at this size), and every move of the request reads
all its nodes. Real transfer plans have a handful of nodes; this bound keeps an outsider
from making one submit hold the store for minutes."""

MAX_PROBLEMS_LISTED = 100
"""A plan with more problems lists this many, then how many more: the first ones are
enough to fix it, and the error message stays readable."""


def validate_plan(
    request_id: object,
    plan: object,
    kinds: Sequence[str],
    executors: Mapping[str, object],
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the plan as stored, its problems); the plan is only meaningful without problems."""
    problems = _id_problems(request_id)
    entries = _entries(plan)
    if isinstance(entries, str):
        return [], [*problems, entries]
    nodes: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        node, found = _node(index, entry, kinds, executors)
        problems += found
        if not found:
            nodes.append({key: node.get(key, []) for key in PLAN_KEYS})
    if not problems:
        problems = _graph_problems(nodes)
    return nodes, _listed(problems)


SIDE_EFFECT = "side_effect"
"""The field of every node move's history detail saying whether the node has a side effect
as the engine read it then: history no write changes, so a plan and node rows rewritten
together, consistently, cannot make money that moved look idle (outsider batch 26)."""


APPROVED_BY = "approved_by"
"""The field of a manual gate's move out of ready naming the person whose action passed it
(``complete_manual``); the audit names a gate moved on without one (outsider batch 37,
a B2: a forged ``start_observing`` with the gate's data passed it unnamed)."""

DONE_BY = "done_by"
"""The field of a wake's history detail naming, for each predecessor, the event that made
it done: ``{name: [seq, at]}``, its number and the time the store gave it. Nobody can write
it before that event exists (its time is the store's clock at the move), so the audit
judges a wake by it after the predecessor is done as well as before (outsider batch 35,
b 1: a wake forged while the withdrawal was observed went unnamed once it completed)."""


PLAN_DIGEST = "plan_digest"
"""The field of a request's ``start`` move naming the sha256 of its plan as it was then
(``plan_digest``): from the start on, the plan is fixed, and a plan that no longer has that
digest was rewritten outside the engine, which then acts on none of the request's nodes and
the audit names it (outsider batch 38, b A1: the plan's and the rows' predecessors, rewritten
together after the withdrawal was sent, let the deposit go while the withdrawal was
observed)."""


def plan_digest(plan: object) -> str:
    """The sha256 of ``plan`` (a request's stored ``data["plan"]``) as canonical JSON."""
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def started_plan(history: Iterable[TransitionEvent]) -> str | None:
    """The plan digest a request's ``start`` recorded (``PLAN_DIGEST``), None before it
    started, and ``""`` for a start that recorded none a digest can be (64 hexadecimal
    digits): the engine's start always records one, so such a start was written outside
    it, and the plan it fixed cannot be known (outsider batch 39, b A1: a forged start
    without one turned the check off, and a rewritten plan sent the deposit early)."""
    for event in history:
        if event.trigger == "start":
            recorded = (event.detail or {}).get(PLAN_DIGEST)
            valid = isinstance(recorded, str) and re.fullmatch(r"[0-9a-f]{64}", recorded)
            return recorded if valid and isinstance(recorded, str) else ""
    return None


def recorded_side_effect(history: Iterable[TransitionEvent]) -> bool:
    """Whether any of a node's moves recorded it with a side effect."""
    return any((event.detail or {}).get(SIDE_EFFECT) is True for event in history)


def node_key(request_id: str, name: str) -> str:
    """The store key of a request's node: the node's name, which no write to its data can
    change, read back by ``node_name``. Built from the texts themselves: a ``str``
    subclass's own ``__format__`` could name another request's node (outsider batch 38,
    b A4)."""
    return str.__str__(request_id) + "/" + str.__str__(name)


def node_name(key: str) -> str:
    """The name a node's store key carries (``node_key``)."""
    return key.partition("/")[2]


def plan_entries(request_data: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A request's stored plan, by node name: the second record of each node's side
    effect and predecessors (a node row's own data is the application's to write). What
    is not a plan entry is left out."""
    plan = request_data.get("plan")
    return {
        n["name"]: n
        for n in (plan if isinstance(plan, list) else ())
        if isinstance(n, Mapping) and isinstance(n.get("name"), str)
    }


def predecessors(data: Mapping[str, Any], entry: Mapping[str, Any]) -> list[object]:
    """The predecessors of a node, by its row's ``data`` and by its request's plan
    ``entry`` alike, as stored: the engine waits for each, and the audit judges a wake by
    each. A value that is no list is one unknown predecessor (a row rewritten outside the
    engine), which the caller refuses or names."""

    def names(value: object) -> list[object]:
        if value is None:
            return []
        return list(value) if isinstance(value, list) else [value]

    return [*names(data.get("predecessors")), *names(entry.get("after"))]


def settled(
    start: str,
    done: Callable[[str], bool],
    before: Callable[[str], Iterable[object]],
    memo: dict[str, bool],
) -> bool:
    """Whether node ``start`` is done for the nodes after it: it is done (``done``: a
    name no node has is not) and so is every node before it (``before``), however far
    back. The one rule of the engine's wakes, the audit's judgement of them and the
    transfer suite's oracle.

    Under the engine a node that ran was woken once its predecessors were all done, and a
    done state is an end, so only rows moved outside it make the walk matter (outsider
    batch 36, b 1: a forged wake and completion of a check between the withdrawal and the
    deposit woke the deposit while the withdrawal was observed). A node the planner
    skipped, which it may do before its predecessors are done, leaves the plan and not its
    order: its successors wait for what it waited for (batch 37, a N1). A loop, which
    only rows rewritten outside the engine make, is not settled. ``memo`` keeps what is
    known between calls (until a node moves), so a plan is walked once."""
    entered: set[str] = set()
    stack = [start]
    while stack:
        name = stack[-1]
        if name in memo:
            stack.pop()
            continue
        if not done(name):
            memo[name] = False
            stack.pop()
            continue
        earlier = list(dict.fromkeys(map(str, before(name))))
        waiting = [p for p in earlier if p not in memo]
        if not waiting or name in entered:
            memo[name] = not waiting and all(memo[p] for p in earlier)
            stack.pop()
            continue
        entered.add(name)
        stack.extend(waiting)
    return memo[start]


def row_differences(
    request_data: Mapping[str, Any], name: str, data: Mapping[str, Any], kind: object
) -> list[str]:
    """How the node row named ``name`` (its ``data``, its context's ``kind``) differs from
    what its request's stored plan made it (``node_rows``): each field that differs, or
    that the plan is not one the engine wrote. A row's executor, side effect, predecessors
    and kind are the plan's; one rewritten outside the engine (a check's executor swapped
    for the bank's) is refused by the engine and named by the audit."""
    plan = request_data.get("plan")
    try:
        expected = {row["name"]: row for row in node_rows(plan)}  # type: ignore[arg-type]
        kinds = {entry["name"]: entry["kind"] for entry in plan}  # type: ignore[union-attr]
    except (KeyError, TypeError, AttributeError):
        return ["its request's stored plan is not one the engine wrote"]
    if name not in expected:
        return [f"its request's plan has no node '{name}'"]
    out = [
        f"{field} is {data.get(field)!r}, and the plan says {value!r}"
        for field, value in expected[name].items()
        if data.get(field) != value
    ]
    if kind != kinds[name]:
        out.append(f"kind is {kind!r}, and the plan says {kinds[name]!r}")
    return out


def node_rows(plan: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What each node row keeps of its (validated) plan entry, in plan order, with its
    successors worked out in one pass."""
    successors: dict[str, list[str]] = {node["name"]: [] for node in plan}
    for node in plan:
        for predecessor in node["after"]:
            successors[predecessor].append(node["name"])
    return [
        {
            "name": node["name"],
            "has_side_effect": node["has_side_effect"],
            "executor": node["executor"],
            "predecessors": list(node["after"]),
            "successors": successors[node["name"]],
        }
        for node in plan
    ]


def _id_problems(request_id: object) -> list[str]:
    if not isinstance(request_id, str) or not request_id or "/" in request_id:
        return [f"request id {describe(request_id)} must be a non-empty string without '/'"]
    return []


def _entries(plan: object) -> list[object] | str:
    """The plan's entries, or the one problem that stops reading them."""
    if isinstance(plan, str | bytes) or not isinstance(plan, Sequence):
        return "the plan must be a list of node mappings"
    try:
        size = len(plan)
        if size > MAX_PLAN_NODES:
            return f"the plan has {size:,} nodes; at most {MAX_PLAN_NODES:,} are allowed"
        entries = list(plan)
    except Exception as exc:
        return f"the plan cannot be read as a list ({type(exc).__name__})"
    return entries or "the plan is empty; it needs nodes"


def _node(
    index: int, entry: object, kinds: Sequence[str], executors: Mapping[str, object]
) -> tuple[dict[Any, Any], list[str]]:
    """One node entry read into a plain dict (with a copy of its ``after`` list), and what
    is wrong with it on its own (its edges are checked later)."""
    if not isinstance(entry, Mapping):
        return {}, [f"node #{index} must be a mapping, not {type(entry).__name__}"]
    try:
        fields = dict(entry.items())
        if isinstance(fields.get("after"), list):
            fields["after"] = list(fields["after"])
    except Exception as exc:
        return {}, [f"node #{index} cannot be read as a mapping ({type(exc).__name__})"]
    return fields, _node_problems(index, fields, kinds, executors)


def _node_problems(
    index: int, fields: dict[Any, Any], kinds: Sequence[str], executors: Mapping[str, object]
) -> list[str]:
    name = fields.get("name")
    label = f"node '{name}'" if _is_name(name) else f"node #{index}"
    problems = [
        f"{label}: unknown key {describe(key)}; keys: {', '.join(PLAN_KEYS)}"
        for key in fields
        if not isinstance(key, str) or key not in PLAN_KEYS
    ]
    problems += [f"{label}: missing '{key}'" for key in REQUIRED_KEYS if key not in fields]
    if "name" in fields and not _is_name(name):
        problems.append(
            f"{label}: name must be a non-empty string without '/'; got {describe(name)}"
        )
    kind = fields.get("kind")
    if "kind" in fields and (not isinstance(kind, str) or kind not in kinds):
        problems.append(f"{label}: kind {describe(kind)} is not one of {', '.join(kinds)}")
    if "has_side_effect" in fields and not isinstance(fields["has_side_effect"], bool):
        problems.append(f"{label}: has_side_effect must be true or false")
    executor = fields.get("executor")
    if "executor" in fields and (not isinstance(executor, str) or executor not in executors):
        known = ", ".join(executors) or "none"
        problems.append(f"{label}: unknown executor {describe(executor)}; executors: {known}")
    after = fields.get("after", [])
    if not isinstance(after, list) or not all(_is_name(p) for p in after):
        problems.append(f"{label}: 'after' must be a list of node names")
    elif len(set(after)) != len(after):
        problems.append(f"{label}: 'after' names a predecessor twice")
    return problems


def _is_name(value: object) -> bool:
    return isinstance(value, str) and bool(value) and "/" not in value


def _graph_problems(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Duplicate names, dangling edges, then cycles."""
    counts = Counter(n["name"] for n in nodes)
    problems = [f"node '{n}' is defined {count} times" for n, count in counts.items() if count > 1]
    for node in nodes:
        problems += [
            f"node '{node['name']}' runs after '{p}', which is not in the plan"
            for p in node["after"]
            if p not in counts
        ]
    if problems:
        return problems
    cycle = _find_cycle({n["name"]: n["after"] for n in nodes})
    return [f"the plan has a cycle: {' -> '.join(cycle)}"] if cycle else []


def _find_cycle(after: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the predecessor graph as a closed path of names in the order they would
    run, or None. Depth-first with an explicit stack: linear, and no recursion limit."""
    ON_PATH, DONE = 1, 2
    mark: dict[str, int] = {}
    for root in after:
        if root in mark:
            continue
        mark[root] = ON_PATH
        path, pending = [root], [iter(after[root])]
        while pending:
            predecessor = next(pending[-1], None)
            if predecessor is None:
                mark[path.pop()] = DONE
                pending.pop()
            elif mark.get(predecessor) == ON_PATH:
                return [*path[path.index(predecessor) :], predecessor][::-1]
            elif predecessor not in mark:
                mark[predecessor] = ON_PATH
                path.append(predecessor)
                pending.append(iter(after[predecessor]))
    return None


def _listed(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS_LISTED:
        return problems
    more = len(problems) - MAX_PROBLEMS_LISTED
    return [*problems[:MAX_PROBLEMS_LISTED], f"... and {more:,} more problems"]


def transfer_version(request: Row, nodes: Iterable[Row]) -> int:
    """A transfer's version as a person reads it: its request's and every node's versions
    together. Every write to any of its rows raises it, so a person's decision on the
    request (``seen=``) is refused when a node moved since the page was read, as when the
    request did (a withdrawal that completed while the operator looked at the page)."""
    return (request.version or 0) + sum(node.version or 0 for node in nodes)
