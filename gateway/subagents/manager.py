"""Sub-agent runs: spawn, run on the ``subagent`` lane, announce, archive, recover.

A run's life (DESIGN §3, recorded in the ``runs`` table, the source of truth after a
restart)::

    queued → running → announcing → done | error | timeout | cancelled | interrupted

The final status is decided by the runtime (never by the model's text) when the child
stops, kept in ``outcome`` while the announce turn runs, and applied in the same
transaction that queues the announce in the outbox. On start-up :meth:`recover` re-enqueues
queued runs, resumes running ones from their transcript (or, with ``onRestart: "fail"``,
announces them as interrupted) and finishes runs that were announcing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from channels import RunUpdate
from gateway.llm import ChatMessage, ModelRequest
from gateway.providers import ProviderError
from gateway.runtime.agents import AgentProfile, resolve_agent, subagent_model_ref
from gateway.runtime.sink import StoreSink
from gateway.runtime.turn import TurnOutcome, TurnSetup, run_turn
from gateway.services import Services
from gateway.sessions import SessionError, SessionKey, chat_messages_from_records
from gateway.state import (
    FINISHED_STATUSES,
    OutboxRecord,
    RunRecord,
    RunStatus,
    SessionRecord,
    StateError,
)
from gateway.subagents.announce import announce_prompt, compose_announce, is_skip, run_name
from gateway.tools import ToolContext, tools_for_subagent
from lanes import JobHandle, JobState, LaneClosed

logger = logging.getLogger(__name__)

SPAWN_FORBIDDEN_NESTED = "sessions_spawn is not allowed from sub-agent sessions"
#: Bound of the announce turn: one model call, so it needs far less than a whole run.
ANNOUNCE_TIMEOUT_SECONDS = 120.0
#: Statuses whose announce goes through a model turn; cancelled and interrupted runs get
#: the system announce at once (a person asked them to stop, or the gateway did).
MODEL_ANNOUNCED: frozenset[str] = frozenset({"done", "error", "timeout"})
UNFINISHED: tuple[RunStatus, ...] = ("queued", "running", "announcing")
#: Backoff of a run whose bookkeeping failed (the database locked past its own retries).
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


class RunNotFoundError(LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no sub-agent run {run_id!r}")
        self.run_id = run_id


class RunFinishedError(Exception):
    def __init__(self, run: RunRecord) -> None:
        super().__init__(f"run {run.run_id} already finished ({run.status})")
        self.run = run


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    task: str
    label: str | None = None
    agent_id: str | None = None
    model: str | None = None
    run_timeout_seconds: float | None = None
    cleanup: Literal["delete", "keep"] = "keep"


@functools.cache
def _subagent_suffix() -> str:
    return resources.files("gateway.templates").joinpath("subagent.md").read_text("utf-8")


class SubagentManager:
    """Owns every sub-agent run of the gateway."""

    def __init__(self, services: Services, *, clock: Any = time.time) -> None:
        self._s = services
        self._clock = clock
        self._handles: dict[str, JobHandle[None]] = {}
        self._prune_at = 64
        self._aborting: set[str] = set()
        self._closing = False
        self._finished = asyncio.Condition()
        self._side_tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<SubagentManager runs={len(self._handles)} closing={self._closing}>"

    # -- spawning --------------------------------------------------------------------

    async def spawn(self, requester: ToolContext, request: SpawnRequest) -> dict[str, Any]:
        """Validate, record and enqueue a run; the result of the ``sessions_spawn`` tool.

        Returns at once: ``{"status": "accepted", "runId", "childSessionKey"}`` (plus
        ``warning``/``modelApplied`` for a model override), or ``forbidden``/``error``.
        """
        try:
            return await self._spawn(requester, request)
        except (OSError, StateError, SessionError) as exc:
            logger.error("spawn could not be recorded", extra={"error": str(exc)})
            return {"status": "error", "error": f"the run could not be recorded: {exc}"}
        except LaneClosed:
            return {"status": "error", "error": "the gateway is shutting down; spawn refused"}

    async def _spawn(self, requester: ToolContext, request: SpawnRequest) -> dict[str, Any]:
        settings = self._s.settings
        if requester.is_subagent:
            return {"status": "forbidden", "error": SPAWN_FORBIDDEN_NESTED}
        if self._closing:
            return {"status": "error", "error": "the gateway is shutting down; spawn refused"}
        target_id = request.agent_id or requester.agent_id
        if target_id not in settings.routing.agents:
            known = ", ".join(settings.agent_ids())
            return {"status": "error", "error": f"unknown agent {target_id!r} (agents: {known})"}
        if target_id != requester.agent_id:
            allowed = self.allowed_targets(requester.agent_id)
            if target_id not in allowed:
                names = ", ".join(sorted(allowed)) or requester.agent_id
                return {
                    "status": "forbidden",
                    "error": f"agent {requester.agent_id!r} may not spawn {target_id!r}; "
                    f"allowed: {names}",
                }
        target = resolve_agent(settings, target_id)
        result: dict[str, Any] = {}
        model_ref = subagent_model_ref(settings, target)
        if request.model is not None:
            problem = settings.model_ref_problem(request.model)
            if problem is None:
                model_ref = request.model
                result["modelApplied"] = True
            else:
                result["modelApplied"] = False
                result["warning"] = (
                    f"model {request.model!r} ignored ({problem}); using {model_ref}"
                )
        timeout = (
            request.run_timeout_seconds
            if request.run_timeout_seconds is not None
            else settings.agent.subagents.run_timeout_seconds
        )
        parent = await self._s.store.require(requester.session_key)
        origin = parent.origin  # captured now, never re-read (DESIGN §3 step 3)
        run_id = str(uuid.uuid4())
        child_key = SessionKey.subagent(target_id)
        child = await self._s.store.ensure(
            child_key,
            parent_key=parent.key,
            label=request.label,
            model=model_ref,
            origin=origin,
            fresh=True,
        )
        transcript = self._s.store.transcript_path(child)
        run = RunRecord(
            run_id=run_id,
            child_session_key=child.key,
            child_session_id=child.session_id,
            parent_session_key=parent.key,
            requester_agent_id=requester.agent_id,
            agent_id=target_id,
            task=request.task,
            created_at=self._clock(),
            label=request.label,
            model=model_ref,
            model_applied=result.get("modelApplied", True),
            cleanup=request.cleanup,
            run_timeout_seconds=timeout,
            origin_channel=origin.channel if origin else None,
            origin_account=origin.account if origin else None,
            origin_chat_id=origin.chat_id if origin else None,
            origin_thread_id=origin.thread_id if origin else None,
            origin_chat_type=origin.chat_type if origin else None,
            transcript_path=str(transcript),
        )
        await self._s.db.runs.insert(run)
        self._publish(run)
        spawned = {"runId": run_id, "childSessionKey": child.key, "label": request.label}
        await self._s.store.append_event(parent, "spawned", spawned)
        await self._s.store.append_event(child, "spawned", {**spawned, "task": request.task})
        self._enqueue(run_id)
        logger.info(
            "sub-agent spawned",
            extra={"run_id": run_id, "agent": target_id, "model": model_ref},
        )
        return {"status": "accepted", "runId": run_id, "childSessionKey": child.key, **result}

    def allowed_targets(self, agent_id: str) -> set[str]:
        """Agent ids ``agent_id`` may spawn: itself, plus ``subagents.allowAgents``."""
        settings = self._s.settings
        agent = settings.routing.agents.get(agent_id)
        allowed = {agent_id}
        if agent is None:
            return allowed
        if "*" in agent.subagents.allow_agents:
            return set(settings.routing.agents)
        return allowed | (set(agent.subagents.allow_agents) & set(settings.routing.agents))

    def _enqueue(self, run_id: str) -> None:
        if len(self._handles) >= self._prune_at:
            # Pruned here rather than by a watcher task per run; only when the map has doubled,
            # so spawning many runs stays linear.
            for done in [k for k, h in self._handles.items() if h.done()]:
                del self._handles[done]
            self._prune_at = max(64, 2 * len(self._handles))
        self._handles[run_id] = self._s.lanes.subagent.submit(lambda: self._guarded(run_id))

    async def _guarded(self, run_id: str, attempt: int = 1) -> None:
        """Run ``_execute``; when recording fails (a locked or full disk), try the run again
        later instead of leaving it stranded until a restart. ``_execute`` picks up from the
        recorded status, so a retry resumes rather than repeats."""
        try:
            await self._execute(run_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (attempt - 1))
            logger.exception(
                "sub-agent run failed to record; retrying", extra={"run_id": run_id, "in": delay}
            )
            if not self._closing:
                loop = asyncio.get_running_loop()
                loop.call_later(delay, self._retry, run_id, attempt + 1)

    def _retry(self, run_id: str, attempt: int) -> None:
        if self._closing:
            return
        self._handles[run_id] = self._s.lanes.subagent.submit(
            lambda: self._guarded(run_id, attempt)
        )

    # -- running ---------------------------------------------------------------------

    async def _execute(self, run_id: str) -> None:
        run = await self._s.db.runs.get(run_id)
        if run is None or run.finished:
            return
        if run.status == "announcing":
            await self._announce(run_id)
            return
        resume = run.status == "running"
        started = run.started_at if resume and run.started_at else self._clock()
        status: RunStatus = "done"
        result: str | None = None
        error: str | None = None
        try:
            run = await self._s.db.runs.update(run_id, status="running", started_at=started)
            self._publish(run)
            outcome = await self._run_child(run, resume=resume)
            result = outcome.text
            if outcome.ended_by == "submit_error":
                status, error = "error", outcome.text
            elif outcome.ended_by == "max_iterations":
                status = "error"
                error = f"stopped after {outcome.iterations} model calls (maxIterations)"
        except TimeoutError:
            status = "timeout"
        except asyncio.CancelledError:
            if run_id not in self._aborting:
                raise  # gateway shutdown: the run stays `running` and resumes on restart
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            status = "cancelled"
        except ProviderError as exc:
            status, error = "error", str(exc)
        except (SessionError, OSError) as exc:  # the transcript could not be written
            status, error = "error", f"transcript: {exc}"
        except Exception as exc:
            logger.exception("sub-agent run crashed", extra={"run_id": run_id})
            status, error = "error", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            self._aborting.discard(run_id)
        run = await self._s.db.runs.update(
            run_id,
            status="announcing",
            outcome=status,
            ended_at=self._clock(),
            result_text=result,
            error=error,
        )
        self._publish(run)
        await self._announce(run_id)

    async def _run_child(self, run: RunRecord, *, resume: bool) -> TurnOutcome:
        settings = self._s.settings
        child = await self._s.store.require(run.child_session_key)
        target = resolve_agent(settings, run.agent_id)
        setup, sink = self._child_setup(run, child, target)
        history = await self._child_history(child, run, resume=resume)
        if resume and history and history[-1].role == "assistant" and not history[-1].tool_calls:
            return TurnOutcome(text=history[-1].content, ended_by="reply")
        timeout = run.run_timeout_seconds or None
        if resume and timeout and run.started_at:
            timeout = max(0.0, run.started_at + timeout - self._clock())
        try:
            async with asyncio.timeout(timeout):
                outcome = await run_turn(setup, self._s.tools, history, sink)
            await sink.sync()  # a line the disk refused ends the run as an error
            return outcome
        finally:
            await asyncio.shield(sink.save_usage())

    def _child_setup(
        self, run: RunRecord, child: SessionRecord, target: AgentProfile
    ) -> tuple[TurnSetup, StoreSink]:
        settings = self._s.settings
        ref = run.model or target.model_ref
        provider, model = self._s.providers.resolve(ref)
        tools = tools_for_subagent(settings, run.requester_agent_id, run.agent_id, self._s.tools)
        context = ToolContext(
            agent_id=run.agent_id,
            session_key=child.key,
            workspace=target.workspace,
            settings=settings,
            session_id=child.session_id,
            is_subagent=True,
            run_id=run.run_id,
            services=self._s.tool_services(),
        )
        setup = TurnSetup(
            provider=provider,
            model_id=model.id,
            max_tokens=model.max_tokens,
            system=target.system_prompt.rstrip() + "\n" + _subagent_suffix(),
            tools=tools,
            max_iterations=target.max_iterations,
            tool_context=context,
        )
        sink = StoreSink(
            self._s.store,
            child,
            cost=model.cost,
            run_id=run.run_id,
            metrics=self._s.metrics,
            model_ref=ref,
        )
        return setup, sink

    async def _child_history(
        self, child: SessionRecord, run: RunRecord, *, resume: bool
    ) -> list[ChatMessage]:
        """The child's conversation: just the task, or (resuming) its transcript with every
        tool call that lost its result answered as interrupted, in the file too."""
        if resume:
            records = (await self._s.store.read(child.key)).records
            raw_results = {
                (r.get("message") or {}).get("toolCallId")
                for r in records
                if r.get("type") == "message" and (r.get("message") or {}).get("role") == "tool"
            }
            history = chat_messages_from_records(records)
            for message in history:
                if message.role == "tool" and message.tool_call_id not in raw_results:
                    await self._s.store.append_message(child, message)
            if history:
                await self._s.store.append_event(child, "resumed", {"runId": run.run_id})
                return history
        task = ChatMessage(role="user", content=run.task)
        await self._s.store.append_message(child, task)
        return [task]

    # -- announcing ------------------------------------------------------------------

    async def _announce(self, run_id: str) -> None:
        run = await self._s.db.runs.get(run_id)
        if run is None or run.finished:
            return
        if await self._s.db.outbox.get_by_run(run_id) is not None:
            # Queued before a crash; only the status update was lost.
            await self._s.db.runs.update(run_id, status=run.outcome or "error")
            await self._notify_finished(run_id)
            return
        status: RunStatus = run.outcome or "error"
        child = await self._s.store.require(run.child_session_key)
        reply: str | None = None
        if status in MODEL_ANNOUNCED:
            reply = await self._announce_turn(run, child, status)
            if reply is not None and is_skip(reply):
                await self._s.db.runs.update(run_id, status=status, announce_state="skipped")
                self._s.metrics.announce_delivery("skipped")
                await self._s.store.append_event(child, "announce", {"skipped": True})
                await self._after_announce(run)
                return
        run = await self._s.db.runs.get(run_id) or run  # usage now includes the announce turn
        runtime = (run.ended_at or self._clock()) - (run.started_at or run.created_at)
        text = compose_announce(
            run,
            status=status,
            reply=reply,
            runtime_seconds=runtime,
            transcript_path=run.transcript_path,
        )
        origin = run.origin
        if origin is None:
            await self._s.db.runs.update(
                run_id, status=status, announce_state="no_origin", announce_text=text
            )
            self._s.metrics.announce_delivery("no_origin")
        else:
            item = OutboxRecord(
                channel=origin.channel,
                account=origin.account,
                chat_id=origin.chat_id,
                thread_id=origin.thread_id,
                text=text,
                created_at=self._clock(),
                run_id=run_id,
            )
            await self._s.db.outbox.insert_for_run(
                item, {"status": status, "announce_state": "queued", "announce_text": text}
            )
            self._s.outbox.kick()
        await self._s.store.append_event(child, "announce", {"status": status, "text": text})
        parent = await self._s.store.get(run.parent_session_key or "")
        if parent is not None and not parent.archived:
            await self._s.store.append_event(
                parent, "subagent_announce", {"runId": run_id, "status": status, "text": text}
            )
        logger.info("sub-agent finished", extra={"run_id": run_id, "status": status})
        await self._after_announce(run)

    async def _announce_turn(
        self, run: RunRecord, child: SessionRecord, status: RunStatus
    ) -> str | None:
        """One model turn in the child session asking for the reply to post; None if the
        model could not give one (the system announce is posted instead)."""
        try:
            target = resolve_agent(self._s.settings, run.agent_id)
            setup, sink = self._child_setup(run, child, target)
            history = await self._s.store.chat_messages(child.key)
            prompt = ChatMessage(
                role="user", content=announce_prompt(status, run.result_text, run.error)
            )
            history.append(prompt)
            await sink.message(prompt)
            request = ModelRequest(
                model=setup.model_id,
                system=setup.system,
                messages=tuple(history),
                max_tokens=setup.max_tokens,
            )
            async with asyncio.timeout(ANNOUNCE_TIMEOUT_SECONDS):
                reply = await setup.provider.complete(request)
            await sink.message(
                ChatMessage(role="assistant", content=reply.text),
                model=reply.model,
                usage=reply.usage,
            )
            await sink.save_usage()
            return reply.text if reply.text.strip() else None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning(
                "announce turn failed; posting the system announce",
                extra={"run_id": run.run_id, "error": str(exc)},
            )
            with contextlib.suppress(Exception):
                await self._s.store.append_event(child, "announce_failed", {"error": str(exc)})
            return None

    async def _after_announce(self, run: RunRecord) -> None:
        """Archive the child (``cleanup: "delete"`` now, else at spawn + archiveAfterMinutes)."""
        try:
            if run.cleanup == "delete":
                await self._s.archive.archive_now(run.child_session_key)
            else:
                minutes = self._s.settings.agent.subagents.archive_after_minutes
                if minutes > 0:
                    due = max(run.created_at + minutes * 60, self._clock())
                    await self._s.archive.schedule(run.child_session_key, due)
        except Exception:
            logger.exception("archiving a sub-agent session failed", extra={"run_id": run.run_id})
        await self._notify_finished(run.run_id)

    async def _notify_finished(self, run_id: str | None = None) -> None:
        if run_id is not None and (run := await self._s.db.runs.get(run_id)) is not None:
            self._publish(run)
            if run.finished:
                self._s.metrics.finished_run(run)
        async with self._finished:
            self._finished.notify_all()

    def _publish(self, run: RunRecord) -> None:
        """Tell the origin channel the run's status (for surfaces that show it live)."""
        origin = run.origin
        channel = self._s.channels.get(origin.channel) if origin else None
        if origin is None or channel is None:
            return
        update = RunUpdate(
            run_id=run.run_id,
            name=run_name(run),
            status=run.status,
            chat_id=origin.chat_id,
            thread_id=origin.thread_id,
        )

        async def send() -> None:
            try:
                await channel.run_update(update)
            except Exception:  # a status display must never break a run
                logger.warning("run update not shown", extra={"run_id": run.run_id}, exc_info=True)

        self._spawn_side_task(send())

    # -- control ---------------------------------------------------------------------

    async def wait(self, run_id: str) -> RunRecord:
        """Wait until ``run_id`` has its final status (tests, ``herald spawn --wait``)."""
        async with self._finished:
            while True:
                run = await self._s.db.runs.get(run_id)
                if run is None:
                    raise RunNotFoundError(run_id)
                if run.finished:
                    return run
                await self._finished.wait()

    async def abort(self, run_id: str) -> RunRecord:
        """Stop a run: a queued one never starts, a running one is cancelled; either is
        announced as ``cancelled``. Raises :class:`RunNotFoundError`/:class:`RunFinishedError`."""
        run = await self._s.db.runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        if run.finished or run.status == "announcing":
            raise RunFinishedError(run)
        handle = self._handles.get(run_id)
        # The lane, not the row, knows whether the job has started (the row lags a moment).
        if handle is not None and handle.state is JobState.RUNNING:
            self._aborting.add(run_id)
            handle.cancel()
            return run
        if handle is not None:
            handle.cancel()  # queued: it will never start
        run = await self._s.db.runs.update(
            run_id, status="announcing", outcome="cancelled", ended_at=self._clock()
        )
        self._spawn_side_task(self._announce(run_id))
        return run

    async def stop_session(self, session_key: str) -> int:
        """``/stop``: abort every unfinished run the session spawned; returns how many."""
        stopped = 0
        for run in await self._s.db.runs.list(
            statuses=("queued", "running"), parent_session_key=session_key
        ):
            with contextlib.suppress(RunNotFoundError, RunFinishedError):
                await self.abort(run.run_id)
                stopped += 1
        return stopped

    def _spawn_side_task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    # -- lifecycle -------------------------------------------------------------------

    async def recover(self) -> dict[str, int]:
        """Pick up what a previous process left: see the module docstring."""
        counts = {"queued": 0, "resumed": 0, "interrupted": 0, "announcing": 0}
        on_restart = self._s.settings.agent.subagents.on_restart
        for run in await self._s.db.runs.list(statuses=UNFINISHED, oldest_first=True):
            if run.status == "running" and on_restart == "fail":
                await self._s.db.runs.update(
                    run.run_id, status="announcing", outcome="interrupted", ended_at=self._clock()
                )
                counts["interrupted"] += 1
            elif run.status == "running":
                counts["resumed"] += 1
            else:
                counts[run.status] += 1
            self._enqueue(run.run_id)
        keeps_forever = self._s.settings.agent.subagents.archive_after_minutes == 0
        for run in await self._unarchived_finished():
            if run.cleanup == "keep" and keeps_forever:
                continue
            await self._after_announce(run)
            counts["archive_settled"] = counts.get("archive_settled", 0) + 1
        if any(counts.values()):
            logger.info("sub-agent runs recovered", extra=counts)
        return counts

    async def _unarchived_finished(self) -> list[RunRecord]:
        """Finished runs whose child was neither archived nor scheduled (a crash between
        the run's final status and its archive step)."""
        finished = ", ".join(f"'{s}'" for s in FINISHED_STATUSES)
        sql = (
            "SELECT r.run_id FROM runs r JOIN sessions s ON s.key = r.child_session_key"
            f" WHERE r.status IN ({finished}) AND s.archived_at IS NULL"
            " AND s.archive_due_at IS NULL"
        )
        ids = await self._s.db.read(lambda conn: [row[0] for row in conn.execute(sql)])
        runs = [await self._s.db.runs.get(run_id) for run_id in ids]
        return [run for run in runs if run is not None]

    async def close(self, drain_seconds: float) -> None:
        """Refuse spawns; let running runs finish for ``drain_seconds``, then cancel them
        (they stay ``running`` and resume on the next start); queued ones stay queued."""
        self._closing = True
        await self._s.lanes.subagent.shutdown(drain_seconds)
        for task in list(self._side_tasks):
            task.cancel()
        await asyncio.gather(*self._side_tasks, return_exceptions=True)
