"""The curated code mutants: realistic semantic bugs in ``machines/systems`` and
``machines/store``, each a small patch a careless engineer could write.

A mutant is an exact replacement of one snippet of one file (the snippet must occur
exactly once, so a catalog that drifted from the code says so instead of testing nothing),
the promise it breaks (what a suite must check to kill it), and the detectors to run, in
order, cheapest first (``code_mutants.detectors``). ``equivalent`` explains a mutant no suite
can tell from the original through the system's API; it is reported as such when it
survives, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

EO = ("exactly-once/memory", "exactly-once/sqlite")
LOG = ("effect-log/memory", "effect-log/sqlite")
TRANSFER = ("transfer/scenarios", "transfer/starts", "transfer/memory", "transfer/sqlite")
SYSTEMS = "machines/systems/"
TRANSFER_PACKAGE = SYSTEMS + "transfer/"
SUITES_ON_MEMORY = ("exactly-once/memory", "effect-log/memory", "transfer/memory")
ATOMIC = "pytest:tests/test_store_atomicity.py"
"""The store's own contract tests: a store mutant the suites cannot reach meets them next
(a mutant of a system meets the suites alone: they are what a user's system meets)."""


@dataclass(frozen=True)
class CodeMutant:
    """One deliberate bug: ``old`` becomes ``new`` in ``path`` (relative to the root)."""

    id: str
    path: str
    bug: str
    breaks: str
    old: str
    new: str
    detectors: tuple[str, ...]
    equivalent: str | None = None


CATALOG: tuple[CodeMutant, ...] = (
    # -- ExactlyOnce ----------------------------------------------------------------------
    CodeMutant(
        "eo-expired-lease-rerun",
        SYSTEMS + "exactly_once.py",
        "a caller that finds the holder's lease expired takes the key over and runs it",
        "an abandoned claim is parked, never run again on a guess",
        old="""            reason = f"the lease of {owner} expired before a result was stored"
            row = self._park(tx, row, reason)
            parked = self._indeterminate(row, reason)
        raise parked""",
        new="""            return tx.update(
                row, {**row.data, **self._lease(), "runs": row.data.get("runs", 0) + 1}
            )
        raise parked""",
        detectors=EO,
    ),
    CodeMutant(
        "eo-retry-after-send",
        SYSTEMS + "exactly_once.py",
        "retries under the claim every error that did not prove a failure, a timeout too",
        "an error raised after a send is never retried within the claim (the double charge)",
        old="if verdict is Verdict.RETRY and attempt <= self.retries",
        new="if verdict is not Verdict.FAILED and attempt <= self.retries",
        detectors=EO,
    ),
    CodeMutant(
        "eo-ack-before-durable",
        SYSTEMS + "exactly_once.py",
        "returns the effect's result even when storing it failed",
        "nothing is acknowledged before its outcome is durable; a result replays identically",
        old="""        except Exception as failed:
            raise self._park_after_write_failure(claim, failed) from failed
        return value""",
        new="""        except Exception:
            pass  # the effect ran: its caller gets the result anyway
        return value""",
        detectors=EO,
    ),
    CodeMutant(
        "eo-no-lease-fence",
        SYSTEMS + "exactly_once.py",
        "a holder whose lease was taken over reports its result as a success",
        "a key any caller was told is indeterminate stays so (lease fencing)",
        old="""        except StaleWrite as lost:
            reason = f"the lease was lost before the result was stored ({lost})"
            raise self._park_quietly(claim, reason) from lost""",
        new="""        except StaleWrite:
            return value  # it ran; someone else's bookkeeping""",
        detectors=EO,
    ),
    CodeMutant(
        "eo-timeout-is-failure",
        SYSTEMS + "exactly_once.py",
        "a timeout is recorded as a clean failure",
        "an error that does not prove the call was not sent parks the key",
        old="        if verdict in (Verdict.RETRY, Verdict.FAILED):",
        new=(
            "        if verdict in (Verdict.RETRY, Verdict.FAILED) or isinstance(error, "
            "TimeoutError):"
        ),
        detectors=EO,
    ),
    CodeMutant(
        "eo-lease-compare-inverted",
        SYSTEMS + "exactly_once.py",
        "the lease expiry comparison is inverted",
        "a live lease answers 'in progress'; only an expired one is parked",
        old="if cast(float, until) > now:",
        new="if cast(float, until) < now:",
        detectors=EO,
    ),
    CodeMutant(
        "eo-reclaim-keeps-owner",
        SYSTEMS + "exactly_once.py",
        "a reclaim forgets to clear the lease's owner",
        "a reclaimed key runs again under a fresh claim",
        old="""                **row.data,
                "owner": None,
                "lease_until": None,
                "reclaims\"""",
        new="""                **row.data,
                "lease_until": None,
                "reclaims\"""",
        detectors=EO,
        equivalent=(
            "a reclaim is legal only from indeterminate, and every move into indeterminate "
            "(ExactlyOnce._park) already cleared the owner: the line restates a fact (kept "
            "as a guard for rows written otherwise, e.g. by hand)"
        ),
    ),
    CodeMutant(
        "eo-decision-inverted",
        SYSTEMS + "exactly_once.py",
        "an operator's 'landed' is recorded as 'did not land' and back",
        "a decision is recorded as decided; a decided key replays the decision",
        old="""            if landed:
                tx.move(""",
        new="""            if not landed:
                tx.move(""",
        detectors=EO,
    ),
    CodeMutant(
        "eo-cancel-is-failure",
        SYSTEMS + "verdicts.py",
        "a cancelled or interrupted call is taken as proof the effect did not happen",
        "a cancelled or interrupted caller leaves the key parked",
        old="""    if not isinstance(error, Exception):
        return Verdict.INDETERMINATE""",
        new="""    if not isinstance(error, Exception):
        return Verdict.FAILED""",
        detectors=EO,
    ),
    # -- EffectLog ------------------------------------------------------------------------
    CodeMutant(
        "log-timeout-not-sent",
        SYSTEMS + "effectlog.py",
        "a timeout is taken as proof the call did not take effect (back to pending)",
        "a call whose outcome is unknown is never run again",
        old="if verdict_of(self.classify, error) in (Verdict.FAILED, Verdict.RETRY):",
        new=(
            "if verdict_of(self.classify, error) in (Verdict.FAILED, Verdict.RETRY) or "
            "isinstance(error, TimeoutError):"
        ),
        detectors=LOG,
    ),
    CodeMutant(
        "log-ack-before-durable",
        SYSTEMS + "effectlog.py",
        "returns the tool's result even when committing it failed",
        "nothing is acknowledged before it is durable; a committed call replays its result",
        old="""        except Exception as failure:
            reason = message_of(failure)
            self._note_unknown(claim, f"its result could not be recorded: {reason}")
            raise EffectNotRecorded(row.key, reason, value) from failure
        return stored""",
        new="""        except Exception:
            return value  # it ran: hand the result back anyway
        return stored""",
        detectors=LOG,
    ),
    CodeMutant(
        "log-saga-oldest-first",
        SYSTEMS + "effectlog.py",
        "the saga compensates in the order the calls were made",
        "the saga compensates newest first",
        old="for key in reversed(signatures)\n",
        new="for key in signatures\n",
        detectors=LOG,
    ),
    CodeMutant(
        "log-missing-compensation-passes",
        SYSTEMS + "effectlog_saga.py",
        "an effect whose tool has no compensation is marked compensated",
        "an effect the saga cannot undo ends compensation_failed (fail closed)",
        old='error: str | None = f"no compensation is registered for tool {tool!r}"',
        new="error: str | None = None",
        detectors=LOG,
    ),
    CodeMutant(
        "log-compensation-off-by-one",
        SYSTEMS + "effectlog_saga.py",
        "the compensation loop counts a first attempt it never made",
        "a compensation is really run before its effect is called compensated",
        old="""        attempt += 1
        try:
            ran = action(row)""",
        new="""        attempt += 1
        try:
            ran = action(row) if attempt > 1 else None""",
        detectors=LOG,
    ),
    CodeMutant(
        "log-cancel-resets",
        SYSTEMS + "effectlog.py",
        "a cancelled or interrupted call goes back to pending, as if it had not been sent",
        "a cancelled or interrupted caller leaves the effect parked (executing, unknown)",
        old="""            except BaseException as interrupted:
                self._note_unknown(
                    claim, f"the caller was interrupted ({type(interrupted).__name__}) mid-run"
                )
                raise""",
        new="""            except BaseException as interrupted:
                self._reset(claim, interrupted)  # type: ignore[arg-type]
                raise""",
        detectors=LOG,
    ),
    CodeMutant(
        "log-unknown-not-noted",
        SYSTEMS + "effectlog.py",
        "a run that ended unknown is not written on the effect",
        "a later caller of an effect whose run ended unknown is told so, not 'still running'",
        old="                self._note_unknown(claim, why)\n",
        new="",
        detectors=(
            *LOG,
            "pytest:tests/test_systems_fail_closed.py -k keeps_an_unknown_outcome_and_says_so",
        ),
        equivalent=(
            "not through the suite: a later caller is told EffectStillExecuting either way, "
            "and the suite's adapter contract makes 'still running' and 'outcome unknown' one "
            "answer (a user's log need not tell them apart); only the reason's wording "
            "differs, which the reference log's own test checks"
        ),
    ),
    # -- TransferEngine -------------------------------------------------------------------
    CodeMutant(
        "tr-lost-submit-fails",
        TRANSFER_PACKAGE + "executor.py",
        "a submit whose answer is unknown fails the node",
        "work that may have moved money is never failed",
        old='    "unknown": "lose_track",\n}\nON_OBSERVE',
        new='    "unknown": "fail",\n}\nON_OBSERVE',
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-resend-after-timeout",
        TRANSFER_PACKAGE + "driver.py",
        "a submit that never reported back is sent again",
        "at most one send per node",
        old="""        detail = said(self.engine_id, evidence=why)
        return self._apply(request_id, row, "lose_track", EXECUTOR, detail)""",
        new="""        reply = self._ask(request_id, row, "submit")
        outcome = ON_SUBMIT.get(reply.answer or "", "lose_track")
        return self._report(request_id, row, outcome, EXECUTOR, reply)""",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-abandon-sent-work",
        TRANSFER_PACKAGE + "driver.py",
        "once a node failed, a node whose submit is out is abandoned like unsent work",
        "work that may have moved money is never failed because a sibling failed",
        old="""        if row.state == NodeState.SUBMITTING:
            return self._recover_send(request_id, row)""",
        new="""        if row.state == NodeState.SUBMITTING:
            if mode is Mode.HALT:
                return self._abandon(request_id, row)
            return self._recover_send(request_id, row)""",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-halt-stops-following",
        TRANSFER_PACKAGE + "driver.py",
        "money in flight is no longer watched once a node failed",
        "money already in flight is followed to its end in every mode",
        old="if row.state in (NodeState.SUBMITTED, NodeState.OBSERVING) and mode is not Mode.IDLE:",
        new="if row.state in (NodeState.SUBMITTED, NodeState.OBSERVING) and mode is Mode.DISPATCH:",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-wake-on-any-predecessor",
        TRANSFER_PACKAGE + "session.py",
        "a node wakes when any one of its predecessors is done",
        "a node starts only after all its predecessors are done",
        old="return [str(p) for p in dict.fromkeys(after) if not self._settled(str(p), memo)]",
        new="return [] if any(self._settled(str(p), memo) for p in after) else [*map(str, after)]",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-skip-stands-for-itself",
        TRANSFER_PACKAGE + "session.py",
        "a skipped node counts as done though the nodes before it are not",
        "a skip leaves the plan, not its order: what came after waits for what came before",
        old="""        def before(p: str) -> list[object]:
            return predecessors""",
        new=(
            "        def before(p: str) -> list[object]:\n"
            "            if self.nodes[p].state == NodeState.SKIPPED:\n"
            "                return []\n"
            "            return predecessors"
        ),
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-release-on-sibling-failure",
        TRANSFER_PACKAGE + "driver.py",
        "abandoning work after a failure also releases the request's reservation",
        "no reservation is released while money the request sent may be moving",
        old="""        detail = said(self.engine_id, evidence=why)
        return self._apply(request_id, row, "fail", EXECUTOR, detail)""",
        new="""        detail = said(self.engine_id, evidence=why)
        with self._session(request_id) as s:
            s.request = s.tx.update(s.request, {**s.request.data, "reservation": "released"})
        return self._apply(request_id, row, "fail", EXECUTOR, detail)""",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-manual-gate-dispatched",
        TRANSFER_PACKAGE + "driver.py",
        "a manual gate is dispatched like any node",
        "a manual gate waits for an operator",
        old='if mode is not Mode.DISPATCH or row.data["name"].startswith(self.manual_prefix):',
        new="if mode is not Mode.DISPATCH:",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-callbacks-before-commit",
        TRANSFER_PACKAGE + "driver.py",
        "callbacks fire inside the transaction, before it commits",
        "a callback announces only a change that was committed",
        old="""            yield session
            session.settle()
        self._fire(request_id, session.calls)""",
        new="""            yield session
            session.settle()
            self._fire(request_id, session.calls)""",
        detectors=TRANSFER,
    ),
    CodeMutant(
        "tr-failure-does-not-halt",
        TRANSFER_PACKAGE + "policy.py",
        "a failed node does not stop the plan: new work is still dispatched",
        "nothing new starts once the plan cannot finish",
        old="STOPPED = frozenset({N.FAILED, N.CANCELLED})",
        new="STOPPED = frozenset({N.CANCELLED})",
        detectors=TRANSFER,
    ),
    # -- stores ---------------------------------------------------------------------------
    CodeMutant(
        "memory-no-version-fence",
        "machines/store/memory.py",
        "a write checks only that the row exists, not that it is the row that was read",
        "a write by a holder whose row changed since it read it is refused (the fence)",
        old="if current is None or not as_read(current, row) or current.context != row.context:",
        new="if current is None or current.context != row.context:",
        detectors=("exactly-once/memory", "effect-log/memory", "transfer/starts"),
    ),
    CodeMutant(
        "memory-insert-overwrites",
        "machines/store/memory.py",
        "an insert of an existing key replaces the row",
        "an insert never overwrites: a finished key is never reset",
        old="""        if existing is not None:
            return same_entity(_read(existing), scope, context), False
""",
        new="",
        detectors=("exactly-once/memory", "effect-log/memory"),
    ),
    CodeMutant(
        "memory-crash-commits",
        "machines/store/memory.py",
        "a transaction that dies by a BaseException keeps what it wrote",
        "a transaction is all or nothing, however it ends",
        old="""            except BaseException:
                tx.rollback()""",
        new="""            except Exception:
                tx.rollback()""",
        detectors=(*SUITES_ON_MEMORY, ATOMIC),
    ),
    CodeMutant(
        "memory-history-kept-on-rollback",
        "machines/store/memory.py",
        "a rolled-back move keeps its history event",
        "the history is exactly the moves that happened",
        old="                store._history[payload].pop()",
        new="                pass",
        detectors=(*SUITES_ON_MEMORY, "pytest:tests/test_store.py -k rolls_the_whole_transaction"),
    ),
    CodeMutant(
        "records-fence-without-version",
        "machines/store/records.py",
        "the write fence compares state and move count, not the version",
        "a write by a holder whose row changed since it read it is refused (the fence)",
        old="""        and current.version == row.version
""",
        new="",
        detectors=(*SUITES_ON_MEMORY, "pytest:tests/test_store.py -k stale_row_is_fenced"),
        equivalent=(
            "not through the systems: every write of theirs that can race is a move (which "
            "changes the state or the move count) or follows a read in its own transaction; "
            "only the store contract tests can tell"
        ),
    ),
    CodeMutant(
        "sql-stale-move-ignored",
        "machines/store/sql.py",
        "a move whose fenced UPDATE matched no row is reported as done",
        "a write that lost the race is refused, never reported as done",
        old="""        if matched is None:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        return moved(row, dest, data_json, now)""",
        new="""        return moved(row, dest, data_json, now)""",
        detectors=("exactly-once/sqlite", "effect-log/sqlite", "transfer/sqlite"),
    ),
    CodeMutant(
        "sqlite-crash-not-rolled-back",
        "machines/store/sqlite.py",
        "a transaction that dies by a BaseException is not rolled back",
        "a transaction is all or nothing, however it ends",
        old="""            except BaseException:
                self._rollback(conn)
                raise
            finally:
                tx.end(""",
        new="""            except Exception:
                self._rollback(conn)
                raise
            finally:
                tx.end(""",
        detectors=("exactly-once/sqlite", "effect-log/sqlite", "transfer/sqlite", ATOMIC),
    ),
    CodeMutant(
        "ddl-history-source",
        "machines/store/ddl.py",
        "the history trigger records the new state as the move's source",
        "the history is an unbroken chain of legal moves",
        old='"NEW.key, NEW.moves, OLD.state, NEW.state,',
        new='"NEW.key, NEW.moves, NEW.state, NEW.state,',
        detectors=("exactly-once/sqlite", "effect-log/sqlite"),
    ),
    CodeMutant(
        "ddl-guards-ignored",
        "machines/store/ddl.py",
        "the database's table of legal moves forgets the guards (any context passes)",
        "the database refuses a move its guard forbids, even from raw SQL",
        old="choices = [sorted(t.when[v]) if v in t.when else [None] for v in variables]",
        new="choices = [[None] for v in variables]",
        detectors=("effect-log/sqlite", "pytest:tests/test_raw_sql_attacks.py"),
        equivalent=(
            "not through the systems: the store decides every move with spec.step before "
            "the database sees it, so only raw SQL can tell (the raw-SQL attack tests)"
        ),
    ),
    CodeMutant(
        "pg-terminal-data-unguarded",
        "machines/store/ddl_postgres.py",
        "PostgreSQL lets the data of a finished entity change",
        "a finished entity's data never changes but its annotations, even from raw SQL",
        old="""    IF OLD.state IN ({in_list(p.terminal) or "NULL"}) THEN""",
        new="""    IF FALSE AND OLD.state IN ({in_list(p.terminal) or "NULL"}) THEN""",
        detectors=("exactly-once/postgres", "pytest:tests/test_raw_sql_attacks.py"),
        equivalent=(
            "not through the systems: every store refuses such an update in Python "
            "(check_annotations) before the database sees it; only raw SQL can tell"
        ),
    ),
)
"""Every mutant, grouped by what it breaks."""
