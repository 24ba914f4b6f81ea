// Herald web chat: vanilla JS, no build step. The protocol is documented in
// channels/webchat/protocol.py. Text from people and agents is only ever put into the page
// as text nodes, never parsed as HTML.
(() => {
  "use strict";

  const MAX_TEXT_BYTES = 32 * 1024;
  const CLIENT_KEY = "herald.webchat.clientId";
  const TOKEN_KEY = "herald.webchat.token";
  const CLIENT_ID = /^[A-Za-z0-9_-]{1,64}$/;
  const BACKOFF_FIRST = 500;
  const BACKOFF_MAX = 30000;
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

  const $ = (id) => document.getElementById(id);
  const els = {
    status: $("status"),
    messages: $("messages"),
    typing: $("typing"),
    error: $("error"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    runs: $("runs"),
    runsEmpty: $("runs-empty"),
    auth: $("auth"),
    tokenForm: $("token-form"),
    token: $("token"),
    tokenError: $("token-error"),
  };

  // -- storage ----------------------------------------------------------------------------

  function load(key) {
    try {
      return window.localStorage.getItem(key);
    } catch {
      return null; // storage disabled: the page still works, without memory
    }
  }

  function save(key, value) {
    try {
      if (value === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, value);
    } catch {
      /* storage disabled */
    }
  }

  // crypto.randomUUID needs a secure context; getRandomValues works on plain http too.
  function newClientId() {
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  function clientId() {
    let id = load(CLIENT_KEY);
    if (!id || !CLIENT_ID.test(id)) {
      id = newClientId();
      save(CLIENT_KEY, id);
    }
    return id;
  }

  // A token may arrive in the fragment (#token=…): keep it, then drop it from the address bar.
  function tokenFromFragment() {
    const params = new URLSearchParams(window.location.hash.slice(1));
    const token = params.get("token");
    if (token) {
      save(TOKEN_KEY, token);
      const url = window.location.pathname + window.location.search;
      window.history.replaceState(null, "", url);
    }
    return Boolean(token);
  }

  // -- rendering --------------------------------------------------------------------------

  const INLINE = /(`[^`\n]+`|\*\*[^*\n]+\*\*|https?:\/\/[^\s<>()"']+[^\s<>()"'.,;:!?])/;

  function renderInline(text, parent) {
    for (const part of text.split(INLINE)) {
      if (!part) continue;
      if (part.length > 2 && part.startsWith("`") && part.endsWith("`")) {
        const code = document.createElement("code");
        code.textContent = part.slice(1, -1);
        parent.append(code);
      } else if (part.length > 4 && part.startsWith("**") && part.endsWith("**")) {
        const strong = document.createElement("strong");
        strong.textContent = part.slice(2, -2);
        parent.append(strong);
      } else if (/^https?:\/\//.test(part)) {
        const a = document.createElement("a");
        a.href = part;
        a.textContent = part;
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        parent.append(a);
      } else {
        parent.append(document.createTextNode(part));
      }
    }
  }

  function renderParagraphs(text, parent) {
    for (const para of text.split(/\n{2,}/)) {
      if (!para.trim()) continue;
      const p = document.createElement("p");
      renderInline(para.replace(/^\n+|\n+$/g, ""), p);
      parent.append(p);
    }
  }

  // Code blocks (```lang … ```), paragraphs, line breaks, `code`, **bold** and links.
  function renderText(text, parent) {
    const fence = /```[^\n`]*\n?([\s\S]*?)```/g;
    let last = 0;
    for (let m = fence.exec(text); m !== null; m = fence.exec(text)) {
      renderParagraphs(text.slice(last, m.index), parent);
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      code.textContent = m[1].replace(/\n$/, "");
      pre.append(code);
      parent.append(pre);
      last = fence.lastIndex;
    }
    renderParagraphs(text.slice(last), parent);
  }

  // An announce, and the reply that combines a batch's results, end with a paragraph
  // starting "Stats: ".
  function splitStats(text) {
    const at = text.lastIndexOf("\n\nStats: ");
    if (at >= 0) return [text.slice(0, at), text.slice(at + 2)];
    if (text.startsWith("Stats: ")) return ["", text];
    return [text, null];
  }

  function timeOf(ts) {
    const date = new Date(typeof ts === "number" ? ts * 1000 : Date.now());
    const el = document.createElement("time");
    el.dateTime = date.toISOString();
    el.textContent = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return el;
  }

  const WHO = { user: "You", reply: "Agent", announce: "Sub-agent result", notice: "Herald" };

  function nearBottom() {
    const m = els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function renderMessage(frame) {
    const kind = WHO[frame.kind] ? frame.kind : "notice";
    const stick = nearBottom();
    const msg = document.createElement("article");
    msg.className = `msg ${kind}`;
    msg.dataset.id = String(frame.id);
    msg.dataset.kind = kind;
    if (typeof frame.runId === "string") msg.dataset.runId = frame.runId;

    const head = document.createElement("header");
    head.className = "msg-head";
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = WHO[kind];
    head.append(who, timeOf(frame.ts));

    const body = document.createElement("div");
    body.className = "msg-body";
    const text = typeof frame.text === "string" ? frame.text : "";
    // Announces and a sessions_yield follow-up reply end with a stats line.
    if (kind === "announce" || kind === "reply") {
      const [main, stats] = splitStats(text);
      renderText(main, body);
      if (stats !== null) {
        const line = document.createElement("p");
        line.className = "stats";
        line.textContent = stats;
        body.append(line);
      }
    } else {
      renderText(text, body);
    }
    msg.append(head, body);
    els.messages.append(msg);
    if (kind === "announce" && typeof frame.runId === "string") markAnnounced(frame.runId);
    if (stick || kind === "user") msg.scrollIntoView({ block: "end" });
  }

  // -- runs panel -------------------------------------------------------------------------
  //
  // Runs form a tree: a run spawned by another run sits in that run's list, and runs of one
  // sessions_yield batch are grouped under the batch in the list they share. Run frames may
  // come in any order (the replay after a reconnect sends each run's latest frame), so every
  // frame re-places its run, and runs waiting for their parent are placed when it arrives.
  // Top-level entries are newest first; a run's children and a batch's runs oldest first.

  const runEls = new Map();
  const batchEls = new Map();
  const HISTORY_LIMIT = 50;
  const TRANSCRIPT_CHARS = 2000;
  const SHORT_ID = 8;

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
    const li = document.createElement("li");
    li.className = "run";
    li.dataset.runId = runId;
    const row = document.createElement("div");
    row.className = "run-row";
    const name = document.createElement("span");
    name.className = "run-name";
    const badge = document.createElement("span");
    badge.className = "badge";
    const when = document.createElement("span");
    when.className = "run-time";
    const actions = document.createElement("span");
    actions.className = "run-actions";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "run-open";
    open.textContent = "Transcript";
    open.setAttribute("aria-expanded", "false");
    const transcript = document.createElement("div");
    transcript.className = "run-transcript";
    transcript.id = `transcript-${runEls.size + 1}`;
    transcript.hidden = true;
    transcript.setAttribute("aria-live", "polite");
    open.setAttribute("aria-controls", transcript.id);
    open.addEventListener("click", () => toggleTranscript(li));
    const show = document.createElement("button");
    show.type = "button";
    show.className = "run-show";
    show.textContent = "Show result";
    show.hidden = true;
    show.addEventListener("click", () => showAnnounce(li.dataset.runId));
    actions.append(open, show);
    row.append(name, badge, when, actions);
    const children = document.createElement("ul");
    children.className = "run-children";
    li.append(row, transcript, children);
    return li;
  }

  function batchGroup(batchId, list) {
    let group = batchEls.get(batchId);
    if (!group) {
      group = document.createElement("li");
      group.className = "batch";
      group.dataset.batchId = batchId;
      const head = document.createElement("div");
      head.className = "batch-head";
      const title = document.createElement("span");
      title.className = "batch-title";
      title.textContent = `Batch ${batchId.slice(0, SHORT_ID)}`;
      title.title = batchId;
      const summary = document.createElement("span");
      summary.className = "batch-summary";
      const runs = document.createElement("ul");
      runs.className = "batch-runs";
      runs.setAttribute("aria-label", `Runs of batch ${batchId.slice(0, SHORT_ID)}`);
      head.append(title, summary);
      group.append(head, runs);
      batchEls.set(batchId, group);
    }
    if (group.parentNode !== list) insertSorted(list, group, list === els.runs);
    return group;
  }

  // Where a run belongs: its parent's list (or the top), inside its batch's group if any.
  function placeRun(li) {
    const parent = runEls.get(li.dataset.parentRunId || "");
    const list = parent ? parent.querySelector(":scope > .run-children") : els.runs;
    const batchId = li.dataset.batchId;
    if (batchId) {
      const group = batchGroup(batchId, list);
      insertSorted(group.querySelector(":scope > .batch-runs"), li, false);
      if (createdOf(li) < createdOf(group) || !group.dataset.created) {
        group.dataset.created = li.dataset.created;
        insertSorted(list, group, list === els.runs);
      }
    } else {
      insertSorted(list, li, list === els.runs);
    }
  }

  const FINAL = new Set(["done", "error", "timeout", "cancelled", "interrupted"]);

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
      els.runsEmpty.hidden = true;
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
    li.querySelector(".run-time").replaceChildren(timeOf(frame.ts));
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
    for (const m of els.messages.querySelectorAll(".msg.announce")) {
      if (m.dataset.runId === frame.runId) markAnnounced(frame.runId);
    }
    if (changed && li.classList.contains("open")) loadTranscript(li);
  }

  function markAnnounced(runId) {
    const li = runEls.get(runId);
    if (li) li.querySelector(".run-show").hidden = false;
  }

  function showAnnounce(runId) {
    const found = [...els.messages.querySelectorAll(".msg.announce")].find(
      (m) => m.dataset.runId === runId,
    );
    if (!found) return;
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
    if (content) renderText(clip(content), body);
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
    const token = load(TOKEN_KEY);
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

  // -- connection -------------------------------------------------------------------------

  const id = clientId();
  const seen = new Set();
  let ws = null;
  let ready = false;
  let backoff = BACKOFF_FIRST;
  let retryTimer = null;
  let errorTimer = null;

  function setStatus(state, text) {
    els.status.dataset.state = state;
    els.status.textContent = text;
  }

  function setReady(value) {
    ready = value;
    els.send.disabled = !value;
    if (!value) setTyping(false);
  }

  function setTyping(on) {
    els.typing.hidden = !on;
  }

  function showError(text) {
    els.error.textContent = text;
    els.error.hidden = false;
    clearTimeout(errorTimer);
    errorTimer = setTimeout(() => {
      els.error.hidden = true;
    }, 8000);
  }

  function socketUrl() {
    const url = new URL("/webchat/ws", window.location.href);
    url.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";
    const token = load(TOKEN_KEY);
    if (token) url.searchParams.set("token", token);
    return url.toString();
  }

  function connect() {
    clearTimeout(retryTimer);
    retryTimer = null;
    if (ws) return;
    setStatus("connecting", "Connecting…");
    let opened = false;
    const socket = new WebSocket(socketUrl());
    ws = socket;
    socket.addEventListener("open", () => {
      opened = true;
      socket.send(JSON.stringify({ type: "hello", clientId: id }));
    });
    socket.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      onFrame(frame);
    });
    // Browsers fire "error" then "close"; some runtimes only "error" for a refused handshake.
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (ws === socket) ws = null;
      setReady(false);
      // A refused handshake hides its status from scripts: ask the server whether the
      // token is the reason (a plain GET of the socket path answers 401 or 426).
      if (!opened) probe();
      else retry();
    };
    socket.addEventListener("close", onLost);
    socket.addEventListener("error", () => {
      if (!opened) onLost();
    });
  }

  async function probe() {
    const token = load(TOKEN_KEY);
    let status = 0;
    try {
      const headers = token ? { Authorization: `Bearer ${token}` } : {};
      const response = await fetch("/webchat/ws", { headers, cache: "no-store" });
      status = response.status;
    } catch {
      status = 0;
    }
    if (status === 401) askToken(token ? "That token was not accepted." : "");
    else retry();
  }

  function retry() {
    if (retryTimer) return;
    const delay = Math.round(backoff * (0.75 + Math.random() * 0.5));
    backoff = Math.min(backoff * 2, BACKOFF_MAX);
    setStatus("offline", `Offline — reconnecting in ${Math.ceil(delay / 1000)} s`);
    retryTimer = setTimeout(connect, delay);
  }

  function askToken(problem) {
    setStatus("auth", "Token needed");
    els.auth.hidden = false;
    els.tokenError.textContent = problem;
    els.tokenError.hidden = !problem;
    els.token.value = "";
    els.token.focus();
  }

  function onFrame(frame) {
    if (!frame || typeof frame !== "object") return;
    switch (frame.type) {
      case "ready":
        backoff = BACKOFF_FIRST;
        els.auth.hidden = true;
        setReady(true);
        setStatus("online", "Connected");
        break;
      case "message":
        if (seen.has(frame.id)) break; // the replay after a reconnect repeats messages
        seen.add(frame.id);
        renderMessage(frame);
        break;
      case "run":
        upsertRun(frame);
        break;
      case "typing":
        setTyping(frame.on === true);
        break;
      case "error":
        showError(String(frame.message || "Something went wrong."));
        break;
      default:
        break;
    }
  }

  // -- composer ---------------------------------------------------------------------------

  // The box is border-box sized: its height must hold the borders too, or a scrollbar shows.
  function grow() {
    const box = els.input;
    box.style.height = "auto";
    const border = box.offsetHeight - box.clientHeight;
    box.style.height = `${Math.min(box.scrollHeight + border, 240)}px`;
  }

  function submit() {
    const text = els.input.value;
    if (!text.trim()) return;
    if (!ready || !ws) {
      showError("Not connected yet — your message is still in the box.");
      return;
    }
    if (new TextEncoder().encode(text).length > MAX_TEXT_BYTES) {
      showError(`That message is too long (the limit is ${MAX_TEXT_BYTES / 1024} KiB).`);
      return;
    }
    ws.send(JSON.stringify({ type: "message", text }));
    els.input.value = "";
    grow();
  }

  els.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  els.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  els.input.addEventListener("input", grow);
  window.addEventListener("resize", grow);
  for (const button of document.querySelectorAll(".suggestion")) {
    button.addEventListener("click", () => {
      els.input.value = button.textContent;
      grow();
      els.input.focus();
    });
  }
  els.tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = els.token.value.trim();
    if (!token) return;
    save(TOKEN_KEY, token);
    els.auth.hidden = true;
    backoff = BACKOFF_FIRST;
    connect();
  });
  // Come back at once when the network or the tab does, instead of waiting out the backoff.
  const reconnectNow = () => {
    if (!ws && retryTimer) connect();
  };
  window.addEventListener("online", reconnectNow);
  // A #token=… link opened on a page that is already loaded changes only the fragment: no
  // reload, so take the token here and connect with it if the page is waiting for one.
  window.addEventListener("hashchange", () => {
    if (!tokenFromFragment() || ws) return;
    els.auth.hidden = true;
    backoff = BACKOFF_FIRST;
    connect();
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") reconnectNow();
  });

  tokenFromFragment();
  grow();
  connect();
})();
