// Herald web chat: the Sessions view, a read-only transcript browser. It lists the gateway's
// sessions (GET /v1/sessions) and shows any session's transcript as written
// (GET /v1/sessions/{key}/transcript): messages, tool calls and their results (collapsed),
// events, and the tokens of each model call and each turn. Requests carry the page's token,
// like any API client. Vanilla JS, no build step; text is only ever put into the page as
// text nodes, never parsed as HTML.
(() => {
  "use strict";

  // Records read at once, and the most one window may hold (the API's own limit).
  const PAGE = 500;
  const MAX_WINDOW = 5000;
  const ROLE_NAMES = { user: "User", assistant: "Assistant", tool: "Tool" };
  // Messages the gateway wrote into a conversation, by their meta.kind.
  const META_NAMES = {
    subagent_completion: "Sub-agent completion",
    compaction: "Summary of earlier turns",
    steer: "Steering message",
  };

  // options: renderText(text, parent) and token() (the gateway token, or null), from app.js.
  function createBrowser(options) {
    const $ = (id) => document.getElementById(id);
    const els = {
      listPane: $("sessions-pane"),
      list: $("sessions"),
      listNote: $("sessions-note"),
      archived: $("sessions-archived"),
      subagents: $("sessions-subagents"),
      refreshList: $("sessions-refresh"),
      pane: $("transcript-pane"),
      info: $("transcript-info"),
      earlier: $("transcript-earlier"),
      note: $("transcript-note"),
      records: $("transcript"),
      refresh: $("transcript-refresh"),
    };
    // What the transcript pane shows: its session key, the records read so far (a window
    // ending at the transcript's end as last read) and where that window starts.
    const current = { key: null, records: [], start: 0, ticket: 0, subagent: false, task: null };

    async function getJson(url) {
      const token = options.token();
      const headers = token ? { Authorization: `Bearer ${token}` } : {};
      try {
        const response = await fetch(url, { headers, cache: "no-store" });
        const body = response.ok ? await response.json() : null;
        return { status: response.status, body };
      } catch {
        return { status: 0, body: null };
      }
    }

    function problem(status, what) {
      if (status === 401) return "The gateway's token is needed to read sessions.";
      if (status === 404) return `No such ${what}.`;
      if (status === 400) return `That is not a session key.`;
      return `The ${what} could not be loaded; try again shortly.`;
    }

    function el(tag, className, text) {
      const node = document.createElement(tag);
      if (className) node.className = className;
      if (text !== undefined) node.textContent = text;
      return node;
    }

    // -- figures, as the stats line writes them ---------------------------------------------

    function tokens(count) {
      if (!Number.isFinite(count)) return "n/a";
      if (count >= 1e6) return `${(count / 1e6).toFixed(1)}m`;
      if (count >= 1e3) return `${(count / 1e3).toFixed(1)}k`;
      return String(count);
    }

    function cost(usd) {
      if (typeof usd !== "number") return "n/a";
      return usd >= 0.01 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
    }

    function when(iso, { relative = false } = {}) {
      const node = el("time");
      const date = new Date(iso);
      if (!iso || Number.isNaN(date.getTime())) {
        node.textContent = "-";
        return node;
      }
      node.dateTime = date.toISOString();
      node.title = date.toLocaleString();
      node.textContent = relative ? ago(date) : date.toLocaleString();
      return node;
    }

    function ago(date) {
      const seconds = (Date.now() - date.getTime()) / 1000;
      const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
      if (seconds < 60) return format.format(-Math.round(seconds), "second");
      if (seconds < 3600) return format.format(-Math.round(seconds / 60), "minute");
      if (seconds < 86400) return format.format(-Math.round(seconds / 3600), "hour");
      if (seconds < 30 * 86400) return format.format(-Math.round(seconds / 86400), "day");
      return date.toLocaleDateString();
    }

    // The chat a session lives in: its origin's channel, else what its key says.
    function channelOf(session) {
      if (session.origin && session.origin.channel) return session.origin.channel;
      const form = String(session.key || "").split(":")[2] || "";
      if (form === "subagent") return "sub-agent";
      return form || session.kind || "-";
    }

    function kindOf(session) {
      const channel = channelOf(session);
      return session.kind === "subagent" && channel !== "sub-agent"
        ? `${channel} · sub-agent`
        : channel;
    }

    function usageText(usage) {
      if (!usage || typeof usage !== "object") return "";
      const parts = [`in ${tokens(usage.input)} / out ${tokens(usage.output)}`];
      if (usage.cacheRead) parts.push(`cache read ${tokens(usage.cacheRead)}`);
      if (usage.cacheWrite) parts.push(`cache write ${tokens(usage.cacheWrite)}`);
      return parts.join(" · ");
    }

    // -- the list ---------------------------------------------------------------------------

    async function loadList() {
      const ticket = ++current.ticket;
      els.listNote.textContent = "Loading the sessions…";
      const query = new URLSearchParams({
        includeSubagents: String(els.subagents.checked),
        includeArchived: String(els.archived.checked),
      });
      const { status, body } = await getJson(`/v1/sessions?${query}`);
      if (ticket !== current.ticket) return;
      if (!body || !Array.isArray(body.sessions)) {
        els.listNote.textContent = problem(status, "sessions");
        els.list.replaceChildren();
        return;
      }
      els.listNote.textContent = body.sessions.length ? "" : "No sessions yet.";
      els.list.replaceChildren(...body.sessions.map(sessionItem));
    }

    function sessionLink(key) {
      const link = el("a", "session-ref", key);
      link.href = `#sessions/${encodeURIComponent(key)}`;
      return link;
    }

    function sessionItem(session) {
      const li = el("li", "session");
      li.dataset.key = session.key;
      li.dataset.archived = String(Boolean(session.archived));
      const link = el("a", "session-link");
      link.href = `#sessions/${encodeURIComponent(session.key)}`;
      // The title a person recognises; the key below it, for the CLI and the API.
      link.append(el("span", "session-title", session.title || session.key));
      link.append(el("span", "session-key", session.key));
      const meta = el("span", "session-meta");
      const usage = session.usage || {};
      meta.append(el("span", "session-channel", kindOf(session)));
      if (session.model) meta.append(el("span", "session-model", session.model));
      meta.append(
        when(session.updatedAt, { relative: true }),
        el("span", "session-tokens", `${tokens(usage.total)} tokens`),
        el("span", "session-cost", cost(session.costUsd)),
      );
      if (session.archived) {
        const tag = el("span", "session-archived", "archived ");
        tag.append(when(session.archivedAt, { relative: true }));
        meta.append(tag);
      }
      li.append(link, meta);
      return li;
    }

    // -- one transcript ---------------------------------------------------------------------

    async function loadTranscript({ earlier = false } = {}) {
      const key = current.key;
      const ticket = ++current.ticket;
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (earlier) query.set("before", String(current.start));
      els.note.textContent = "Loading the transcript…";
      const url = `/v1/sessions/${encodeURIComponent(key)}/transcript?${query}`;
      const { status, body } = await getJson(url);
      if (ticket !== current.ticket) return; // the reader moved on meanwhile
      if (!body || !Array.isArray(body.records)) {
        els.note.textContent = problem(status, "session");
        if (!earlier) {
          els.info.replaceChildren();
          els.records.replaceChildren();
        }
        return;
      }
      current.records = earlier ? [...body.records, ...current.records] : body.records;
      current.start = body.start;
      current.subagent = body.session.kind === "subagent" && body.start === 0;
      showInfo(body);
      renderRecords();
      const room = current.records.length < MAX_WINDOW;
      els.earlier.hidden = !(current.start > 0 && room);
      const notes = [];
      if (current.start > 0) notes.push(`Showing the last ${current.records.length} of ${body.total} records.`);
      if (body.badLines.length) notes.push(`Unreadable lines left out: ${body.badLines.join(", ")}.`);
      if (body.tornBytes) notes.push(`A torn last line (${body.tornBytes} bytes) is left out.`);
      els.note.textContent = notes.join(" ");
    }

    function showInfo(body) {
      const session = body.session;
      const usage = session.usage || {};
      const rows = [
        ["Session", session.key],
        ["Channel", kindOf(session)],
        ["Agent", session.agentId],
        ["Model", session.model || "-"],
        ["Last activity", when(session.updatedAt)],
        ["Tokens", `${tokens(usage.total)} (${usageText(usage)})`],
        ["Cost", cost(session.costUsd)],
        ["Transcript", session.transcriptPath || "(gone)"],
      ];
      if (session.parentKey) rows.splice(2, 0, ["Parent", sessionLink(session.parentKey)]);
      if (session.archived) rows.push(["Archived", when(session.archivedAt)]);
      const list = el("dl", "info-list");
      for (const [name, value] of rows) {
        const dd = el("dd");
        if (value instanceof Node) dd.append(value);
        else dd.textContent = value;
        list.append(el("dt", "", name), dd);
      }
      const title = el("h2", "transcript-title", session.title || session.label || session.key);
      els.info.replaceChildren(title, list);
    }

    function renderRecords() {
      const out = [];
      current.task = current.subagent
        ? current.records.find((r) => r.type === "message" && r.message?.role === "user")
        : null;
      // Tokens of the model calls since the last message of a person: a turn's usage.
      let turn = null;
      const closeTurn = () => {
        if (turn && turn.calls) out.push(turnItem(turn));
        turn = null;
      };
      current.records.forEach((record, i) => {
        const message = record.type === "message" && record.message ? record.message : null;
        if (message && message.role === "user") closeTurn();
        out.push(recordItem(record, current.start + i));
        if (message && message.role === "assistant" && message.usage) {
          turn = turn || { calls: 0, input: 0, output: 0, total: 0 };
          turn.calls += 1;
          turn.input += message.usage.input || 0;
          turn.output += message.usage.output || 0;
          turn.total += message.usage.total || 0;
        }
      });
      closeTurn();
      els.records.replaceChildren(...out);
    }

    function turnItem(turn) {
      const calls = `${turn.calls} model call${turn.calls === 1 ? "" : "s"}`;
      const text = `Turn: ${calls} · tokens ${tokens(turn.total)} (in ${tokens(turn.input)} / out ${tokens(turn.output)})`;
      return el("li", "tx-turn", text);
    }

    function stamp(record) {
      const node = el("time", "tx-when");
      const date = new Date(record.timestamp);
      if (record.timestamp && !Number.isNaN(date.getTime())) {
        node.dateTime = date.toISOString();
        node.title = date.toLocaleString();
        node.textContent = date.toLocaleTimeString([], {
          hour: "2-digit",
          minute: "2-digit",
          second: "2-digit",
        });
      }
      return node;
    }

    function folded(summaryText, bodyText, className) {
      const details = el("details", className);
      details.append(el("summary", "", summaryText), el("pre", "tx-pre", bodyText));
      return details;
    }

    function json(value) {
      return JSON.stringify(value ?? {}, null, 2);
    }

    function recordItem(record, index) {
      const li = el("li", `tx-record tx-${record.type === "message" ? "message" : record.type}`);
      li.dataset.index = String(index);
      li.dataset.type = String(record.type);
      if (record.type === "message" && record.message && typeof record.message === "object") {
        messageItem(li, record);
      } else if (record.type === "event") {
        li.append(
          stamp(record),
          folded(`Event ${record.event ?? "?"}`, json(record.data), "tx-event-data"),
        );
      } else if (record.type === "session") {
        const head = el("p", "tx-head", `Session started · id ${record.id}`);
        if (typeof record.parentSessionKey === "string") {
          head.append(" · spawned by ", sessionLink(record.parentSessionKey));
        }
        li.append(stamp(record), head);
      } else {
        li.append(stamp(record), folded(`A line of type “${record.type}”`, json(record), "tx-raw"));
      }
      return li;
    }

    // Who wrote a message: a sub-agent session's first user message is its task; the
    // gateway writes the announce request and results of runs into conversations.
    function speaker(record, role, kind, content) {
      if (META_NAMES[kind]) return META_NAMES[kind];
      if (role !== "user") return ROLE_NAMES[role] || String(record.message.role);
      if (record === current.task) return "Task";
      return /^\[(announce|sub-agent completion)\]/.test(content) ? "Gateway" : "User";
    }

    function messageItem(li, record) {
      const message = record.message;
      const role = ROLE_NAMES[message.role] ? message.role : "other";
      const kind = record.meta && typeof record.meta.kind === "string" ? record.meta.kind : null;
      li.dataset.role = role;
      if (kind) li.dataset.meta = kind;
      const content = typeof message.content === "string" ? message.content : json(message.content);
      if (role === "tool") {
        const lines = content ? content.split("\n").length : 0;
        const label = `Result of ${message.toolName || "a tool"} · ${lines} line${lines === 1 ? "" : "s"}${message.isError ? " · error" : ""}`;
        const result = folded(label, content, "tx-tool-result");
        if (message.isError) result.classList.add("is-error");
        li.append(stamp(record), result);
        return;
      }
      const head = el("p", "tx-who", speaker(record, role, kind, content));
      const body = el("div", "tx-body");
      if (content) options.renderText(content, body);
      for (const call of Array.isArray(message.toolCalls) ? message.toolCalls : []) {
        const args = call && typeof call.arguments === "object" ? call.arguments : {};
        const brief = JSON.stringify(args);
        const short = brief.length > 80 ? `${brief.slice(0, 79)}…` : brief;
        body.append(folded(`→ ${call.name}(${short})`, json(args), "tx-tool-call"));
      }
      li.append(stamp(record), head, body);
      if (message.usage || message.model) {
        const parts = [];
        if (message.model) parts.push(message.model);
        if (message.usage) parts.push(`tokens ${tokens(message.usage.total)} (${usageText(message.usage)})`);
        li.append(el("p", "tx-usage", parts.join(" · ")));
      }
    }

    // -- the pane shown ---------------------------------------------------------------------

    function show(key) {
      els.listPane.hidden = Boolean(key);
      els.pane.hidden = !key;
      if (!key) {
        current.key = null;
        loadList();
        return;
      }
      if (current.key !== key) {
        current.key = key;
        current.records = [];
        current.start = 0;
        els.info.replaceChildren();
        els.records.replaceChildren();
      }
      loadTranscript();
    }

    els.archived.addEventListener("change", loadList);
    els.subagents.addEventListener("change", loadList);
    els.refreshList.addEventListener("click", loadList);
    els.refresh.addEventListener("click", () => loadTranscript());
    els.earlier.addEventListener("click", () => loadTranscript({ earlier: true }));

    return { show };
  }

  window.HeraldSessions = { createBrowser };
})();
