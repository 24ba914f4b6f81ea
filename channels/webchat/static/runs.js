// Herald web chat: the sub-agent runs panel, a tree of runs with their batches and each
// run's transcript in place. Vanilla JS, no build step; app.js creates the panel and feeds it
// the "run" frames of the protocol (channels/webchat/protocol.py). Text is only ever put into
// the page as text nodes, never parsed as HTML.
(() => {
  "use strict";

  const { el, button } = window.HeraldDom;

  const STATUS_LABELS = {
    queued: "queued",
    running: "running",
    announcing: "announcing",
    done: "done",
    error: "error",
    timeout: "timed out",
    cancelled: "cancelled",
    interrupted: "interrupted",
  };

  // Messages of a transcript read at once (the history API's newest), and the characters
  // shown of each: the panel is narrow, the whole file stays on disk.
  const HISTORY_LIMIT = 50;
  const TRANSCRIPT_CHARS = 2000;
  // Characters of a batch id shown, as on the batch's stats line.
  const SHORT_ID = 8;
  const FINAL = new Set(["done", "error", "timeout", "cancelled", "interrupted"]);

  // Runs form a tree: a run spawned by another run sits in that run's list, and runs of one
  // sessions_yield batch are grouped under the batch in the list they share. Run frames may
  // come in any order (the replay after a reconnect sends each run's latest frame), so every
  // frame re-places its run, and runs waiting for their parent are placed when it arrives.
  // Top-level entries are newest first; a run's children and a batch's runs oldest first.
  //
  // options: list (the top <ul>), empty (the "no runs yet" note), messages (the conversation,
  // to find a run's announce), renderText(text, parent), timeOf(ts), token() (the gateway
  // token, or null), onCount({total, active}) (after every change) and onShowResult()
  // (before the conversation scrolls to a run's announce), all from app.js.
  function createPanel(options) {
    const runEls = new Map();
    const batchEls = new Map();
    let ticker = null;

    function createdOf(el) {
      const value = Number(el.dataset.created);
      return Number.isFinite(value) ? value : Infinity;
    }

    function insertSorted(list, el, newestFirst) {
      const at = createdOf(el);
      const items = [...list.children].filter((item) => item !== el);
      const before = items.find((item) =>
        newestFirst ? createdOf(item) < at : createdOf(item) > at,
      );
      if (before) {
        if (el.nextSibling !== before || el.parentNode !== list) list.insertBefore(el, before);
      } else if (el.parentNode !== list || list.lastElementChild !== el) {
        list.append(el);
      }
    }

    function newRunElement(runId) {
      const task = el("p", "run-task");
      task.hidden = true;
      const meta = el(
        "span",
        "run-meta",
        el("span", "run-model"),
        el("span", "run-runtime"),
        el("span", "run-time"),
      );
      const transcript = el("div", "run-transcript");
      transcript.id = `transcript-${runEls.size + 1}`;
      transcript.hidden = true;
      transcript.setAttribute("aria-live", "polite");
      const li = el("li", "run");
      li.dataset.runId = runId;
      const open = button("run-open", "Transcript");
      open.setAttribute("aria-expanded", "false");
      open.setAttribute("aria-controls", transcript.id);
      open.addEventListener("click", () => toggleTranscript(li));
      const show = button("run-show", "Show result");
      show.hidden = true;
      show.addEventListener("click", () => showAnnounce(li.dataset.runId));
      // Meta and actions share a line when they fit; else the actions wrap below.
      const foot = el("div", "run-foot", meta, el("span", "run-actions", open, show));
      const row = el("div", "run-row", el("span", "run-name"), el("span", "badge"), task, foot);
      li.append(row, transcript, el("ul", "run-children"));
      return li;
    }

    function batchGroup(batchId, list) {
      let group = batchEls.get(batchId);
      if (!group) {
        const short = batchId.slice(0, SHORT_ID);
        const title = el("span", "batch-title", `Batch ${short}`);
        title.title = batchId;
        const runs = el("ul", "batch-runs");
        runs.setAttribute("aria-label", `Runs of batch ${short}`);
        const head = el("div", "batch-head", title, el("span", "batch-summary"));
        group = el("li", "batch", head, runs);
        group.dataset.batchId = batchId;
        batchEls.set(batchId, group);
      }
      if (group.parentNode !== list) insertSorted(list, group, list === options.list);
      return group;
    }

    // Where a run belongs: its parent's list (or the top), inside its batch's group if any.
    function placeRun(li) {
      const parent = runEls.get(li.dataset.parentRunId || "");
      const list = parent ? parent.querySelector(":scope > .run-children") : options.list;
      const batchId = li.dataset.batchId;
      if (batchId) {
        const group = batchGroup(batchId, list);
        insertSorted(group.querySelector(":scope > .batch-runs"), li, false);
        if (createdOf(li) < createdOf(group) || !group.dataset.created) {
          group.dataset.created = li.dataset.created;
          insertSorted(list, group, list === options.list);
        }
      } else {
        insertSorted(list, li, list === options.list);
      }
    }

    function refreshBatches() {
      for (const [batchId, group] of batchEls) {
        const runs = [...group.querySelectorAll(":scope > .batch-runs > .run")];
        if (!runs.length) {
          group.remove();
          batchEls.delete(batchId);
          continue;
        }
        const done = runs.filter((r) => FINAL.has(r.dataset.status)).length;
        const label = `${runs.length} run${runs.length === 1 ? "" : "s"}, ${done} finished`;
        group.querySelector(".batch-summary").textContent = label;
        group.dataset.state = done === runs.length ? "finished" : "waiting";
      }
    }

    function upsertRun(frame) {
      if (typeof frame.runId !== "string") return;
      let li = runEls.get(frame.runId);
      const created = !li;
      if (!li) {
        li = newRunElement(frame.runId);
        runEls.set(frame.runId, li);
        options.empty.hidden = true;
      }
      const status = String(frame.status || "queued");
      const changed = li.dataset.status !== status;
      const depth = Number.isInteger(frame.depth) && frame.depth > 0 ? frame.depth : 1;
      li.dataset.status = status;
      li.dataset.depth = String(depth);
      li.dataset.parentRunId = typeof frame.parentRunId === "string" ? frame.parentRunId : "";
      li.dataset.batchId = typeof frame.batchId === "string" ? frame.batchId : "";
      li.dataset.sessionKey = typeof frame.sessionKey === "string" ? frame.sessionKey : "";
      if (typeof frame.createdAt === "number") li.dataset.created = String(frame.createdAt);
      else if (!li.dataset.created && typeof frame.ts === "number") li.dataset.created = String(frame.ts);
      const name = frame.name || frame.runId;
      li.querySelector(".run-name").textContent = name;
      li.querySelector(".run-name").title = name;
      li.querySelector(".badge").textContent = STATUS_LABELS[status] || status;
      // The task, unless the name already is (a run without a label is named by its task).
      const task = typeof frame.task === "string" ? frame.task.trim() : "";
      const taskEl = li.querySelector(".run-task");
      taskEl.textContent = task;
      taskEl.title = task;
      taskEl.hidden = !task || sameStart(name, task);
      li.querySelector(".run-model").textContent = typeof frame.model === "string" ? frame.model : "";
      li.dataset.started = typeof frame.startedAt === "number" ? String(frame.startedAt) : "";
      li.dataset.ended = typeof frame.endedAt === "number" ? String(frame.endedAt) : "";
      showRuntime(li);
      li.querySelector(".run-time").replaceChildren(options.timeOf(frame.createdAt ?? frame.ts));
      li.querySelector(".run-open").hidden = !li.dataset.sessionKey;
      li.setAttribute("aria-label", `${name}: ${STATUS_LABELS[status] || status}`);
      placeRun(li);
      if (created) {
        // Runs that came before this one, their parent, move under it now.
        for (const other of runEls.values()) {
          if (other.dataset.parentRunId === frame.runId) placeRun(other);
        }
      }
      refreshBatches();
      for (const m of options.messages.querySelectorAll(".msg.announce")) {
        if (m.dataset.runId === frame.runId) markAnnounced(frame.runId);
      }
      if (changed && li.classList.contains("open")) loadTranscript(li);
      tick();
    }

    function sameStart(name, task) {
      const flat = task.replace(/\s+/g, " ");
      return flat === name || (name.endsWith("…") && flat.startsWith(name.slice(0, -1)));
    }

    // Runtime as the stats line writes it: 42s, 5m12s, 1h05m.
    function duration(seconds) {
      const s = Math.max(0, Math.floor(seconds));
      if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
      if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
      return `${s}s`;
    }

    function showRuntime(li) {
      const started = Number(li.dataset.started);
      const el = li.querySelector(".run-runtime");
      if (!li.dataset.started || !Number.isFinite(started)) {
        el.textContent = "";
        return;
      }
      const ended = li.dataset.ended ? Number(li.dataset.ended) : Date.now() / 1000;
      el.textContent = duration(ended - started);
      el.title = li.dataset.ended ? "runtime" : "running for";
    }

    // Runs still going show their runtime growing, once a second; the timer stops with them.
    function live(li) {
      return Boolean(li.dataset.started) && !li.dataset.ended && !FINAL.has(li.dataset.status);
    }

    function tick() {
      const running = [...runEls.values()].filter(live);
      for (const li of running) showRuntime(li);
      if (running.length && ticker === null) ticker = setInterval(tick, 1000);
      if (!running.length && ticker !== null) {
        clearInterval(ticker);
        ticker = null;
      }
      if (options.onCount) {
        const active = [...runEls.values()].filter((li) => !FINAL.has(li.dataset.status)).length;
        options.onCount({ total: runEls.size, active });
      }
    }

    function markAnnounced(runId) {
      const li = runEls.get(runId);
      if (li) li.querySelector(".run-show").hidden = false;
    }

    function showAnnounce(runId) {
      const found = [...options.messages.querySelectorAll(".msg.announce")].find(
        (m) => m.dataset.runId === runId,
      );
      if (!found) return;
      if (options.onShowResult) options.onShowResult();
      found.scrollIntoView({ block: "center", behavior: "smooth" });
      found.classList.remove("flash");
      void found.offsetWidth; // restart the animation
      found.classList.add("flash");
    }

    // -- a run's transcript, read from GET /v1/sessions/{key}/history ------------------------

    function toggleTranscript(li) {
      const open = !li.classList.contains("open");
      li.classList.toggle("open", open);
      li.querySelector(".run-open").setAttribute("aria-expanded", String(open));
      li.querySelector(":scope > .run-transcript").hidden = !open;
      if (open) loadTranscript(li);
    }

    function clip(text) {
      return text.length > TRANSCRIPT_CHARS ? `${text.slice(0, TRANSCRIPT_CHARS)}…` : text;
    }

    function transcriptNote(box, text) {
      const p = document.createElement("p");
      p.className = "tx-note";
      p.textContent = text;
      box.replaceChildren(p);
    }

    // Who said it: the run's first user message is its task; later ones come from the
    // gateway (the announce request, results of runs it spawned) or are steering messages.
    function speaker(message, content, first) {
      if (message.role === "tool") return `Tool ${message.toolName || ""}`.trim();
      if (message.role === "assistant") return "Sub-agent";
      if (message.role !== "user") return String(message.role || "other");
      if (first) return "Task";
      return /^\[(announce|sub-agent completion)\]/.test(content) ? "Gateway" : "Message";
    }

    function transcriptEntry(message, first) {
      const entry = document.createElement("div");
      const role = ["user", "assistant", "tool"].includes(message.role) ? message.role : "other";
      entry.className = `tx-msg ${role}`;
      const content = typeof message.content === "string" ? message.content : "";
      const who = document.createElement("span");
      who.className = "tx-role";
      who.textContent = speaker(message, content, first);
      const body = document.createElement("div");
      body.className = "tx-text";
      if (content) options.renderText(clip(content), body);
      for (const call of Array.isArray(message.toolCalls) ? message.toolCalls : []) {
        const line = document.createElement("p");
        line.className = "tx-call";
        line.textContent = clip(`→ ${call.name}(${JSON.stringify(call.arguments ?? {})})`);
        body.append(line);
      }
      entry.append(who, body);
      return entry;
    }

    async function loadTranscript(li) {
      const box = li.querySelector(":scope > .run-transcript");
      const key = li.dataset.sessionKey;
      if (!key) return;
      const ticket = String(Number(li.dataset.ticket || "0") + 1);
      li.dataset.ticket = ticket;
      if (!box.childElementCount) transcriptNote(box, "Loading the transcript…");
      const token = options.token();
      const headers = token ? { Authorization: `Bearer ${token}` } : {};
      const url =
        `/v1/sessions/${encodeURIComponent(key)}/history` +
        `?limit=${HISTORY_LIMIT}&includeTools=true`;
      let status = 0;
      let body = null;
      try {
        const response = await fetch(url, { headers, cache: "no-store" });
        status = response.status;
        if (response.ok) body = await response.json();
      } catch {
        status = 0;
      }
      if (li.dataset.ticket !== ticket) return; // a newer load is under way
      if (body && Array.isArray(body.messages)) {
        if (!body.messages.length) {
          transcriptNote(box, "Nothing in the transcript yet.");
          return;
        }
        const firstUser = body.messages.findIndex((m) => m.role === "user");
        box.replaceChildren(...body.messages.map((m, i) => transcriptEntry(m, i === firstUser)));
        return;
      }
      if (status === 401) transcriptNote(box, "The gateway's token is needed to read transcripts.");
      else if (status === 404) transcriptNote(box, "This run has no transcript yet.");
      else transcriptNote(box, "The transcript could not be loaded; try again shortly.");
    }

    return { upsert: upsertRun, markAnnounced };
  }

  window.HeraldRuns = { createPanel };
})();
