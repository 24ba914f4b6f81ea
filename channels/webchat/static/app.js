// Herald web chat: vanilla JS, no build step. The protocol is documented in
// channels/webchat/protocol.py; the runs panel is runs.js, the chat's scheduled jobs above it
// jobs.js and the Sessions view (a read-only transcript browser) sessions.js, all loaded
// before this file. Text from people and
// agents is only ever put into the page as text nodes, never parsed as HTML.
(() => {
  "use strict";

  const MAX_TEXT_BYTES = 32 * 1024;
  const CLIENT_KEY = "herald.webchat.clientId";
  const TOKEN_KEY = "herald.webchat.token";
  const CLIENT_ID = /^[A-Za-z0-9_-]{1,64}$/;
  const BACKOFF_FIRST = 500;
  const BACKOFF_MAX = 30000;

  const $ = (id) => document.getElementById(id);
  const els = {
    status: $("status"),
    statusText: $("status-text"),
    intro: $("intro"),
    messages: $("messages"),
    toNewest: $("to-newest"),
    typing: $("typing"),
    error: $("error"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    runs: $("runs"),
    runsEmpty: $("runs-empty"),
    runsPanel: $("runs-panel"),
    runsToggle: $("runs-toggle"),
    runsCount: $("runs-count"),
    runsClose: $("runs-close"),
    jobs: $("jobs"),
    jobsList: $("jobs-list"),
    jobsNote: $("jobs-note"),
    jobsBadge: $("jobs-badge"),
    jobsCount: $("jobs-count"),
    chatView: $("chat-view"),
    sessionsView: $("sessions-view"),
    navChat: $("nav-chat"),
    navSessions: $("nav-sessions"),
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

  // -- keeping the newest message in view ----------------------------------------------------
  //
  // The conversation follows new messages while it is scrolled to the bottom ("pinned"), also
  // when its box shrinks (the composer grows, the typing line or an error shows, a phone's
  // keyboard opens): a ResizeObserver puts it back at the bottom. Scrolled up, it stays put
  // and a button offers the newest message.

  let pinned = true;

  function nearBottom() {
    const m = els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function toBottom() {
    els.messages.scrollTop = els.messages.scrollHeight;
    pinned = true;
    els.toNewest.hidden = true;
  }

  els.messages.addEventListener(
    "scroll",
    () => {
      if (!els.messages.clientHeight) return; // hidden (another view): nothing to learn
      pinned = nearBottom();
      if (pinned) els.toNewest.hidden = true;
    },
    { passive: true },
  );
  new ResizeObserver(() => {
    if (pinned && els.messages.clientHeight) toBottom();
  }).observe(els.messages);
  els.toNewest.addEventListener("click", toBottom);

  // A stats line wraps at its " • " separators, not inside a figure: each part is kept
  // whole, except a part too long for a phone's line (a path, a session key), which may
  // break anywhere. The text stays the line as posted.
  const STATS_SEPARATOR = " • ";
  const STATS_PART_WHOLE = 32;
  function renderStats(stats) {
    const line = document.createElement("p");
    line.className = "stats";
    stats.split(STATS_SEPARATOR).forEach((part, i) => {
      if (i > 0) line.append(STATS_SEPARATOR);
      const span = document.createElement("span");
      const long = part.length > STATS_PART_WHOLE;
      span.className = long ? "stats-part long" : "stats-part";
      span.textContent = part;
      if (long) span.title = part;
      line.append(span);
    });
    // On a phone the long parts are cut to one line each; a tap shows them whole.
    line.addEventListener("click", () => line.classList.toggle("open"));
    return line;
  }

  function renderMessage(frame) {
    const kind = WHO[frame.kind] ? frame.kind : "notice";
    const stick = pinned;
    // The final reply of a turn written before the person's eyes takes its place.
    const growing = streams.get(frame.id);
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
        body.append(renderStats(stats));
      }
    } else {
      renderText(text, body);
    }
    msg.append(head, body);
    if (growing) {
      streams.delete(frame.id);
      growing.el.replaceWith(msg);
    } else {
      els.messages.append(msg);
    }
    // The suggestions are for an empty conversation only.
    els.intro.hidden = true;
    if (kind === "announce" && typeof frame.runId === "string") runsPanel.markAnnounced(frame.runId);
    if (stick || kind === "user") toBottom();
    else els.toNewest.hidden = false;
  }

  // -- replies shown as they are written ---------------------------------------------------
  //
  // Delta frames grow one reply per turn (its turnId is the id its final message will
  // have). The text is drawn at most once per animation frame however fast pieces come, and
  // the final message replaces it in place, so nothing jumps or flashes.

  const streams = new Map(); // turnId → { el, body, text, drawn }

  function growReply(frame) {
    const turnId = String(frame.turnId);
    let entry = streams.get(turnId);
    if (frame.end === true) {
      if (entry) {
        entry.el.remove(); // the turn ended without a reply of its own (stopped, or silent)
        streams.delete(turnId);
      }
      return;
    }
    if (seen.has(turnId)) return; // its final message is shown already
    const text = typeof frame.text === "string" ? frame.text : "";
    if (!entry) {
      const el = document.createElement("article");
      el.className = "msg reply streaming";
      el.dataset.kind = "reply";
      el.dataset.turnId = turnId;
      el.setAttribute("aria-busy", "true");
      const head = document.createElement("header");
      head.className = "msg-head";
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = WHO.reply;
      head.append(who, timeOf());
      const body = document.createElement("div");
      body.className = "msg-body";
      el.append(head, body);
      els.messages.append(el);
      els.intro.hidden = true;
      entry = { el, body, text: "", drawn: true };
      streams.set(turnId, entry);
    }
    entry.text = frame.reset === true ? text : entry.text + text;
    if (entry.drawn) {
      entry.drawn = false;
      requestAnimationFrame(() => drawGrowing(entry));
    }
  }

  function drawGrowing(entry) {
    entry.drawn = true;
    if (!entry.el.isConnected) return;
    const stick = pinned;
    entry.body.replaceChildren();
    renderText(entry.text, entry.body);
    if (stick) toBottom();
    else els.toNewest.hidden = false;
  }

  // -- runs panel (runs.js) ----------------------------------------------------------------

  const runsPanel = window.HeraldRuns.createPanel({
    list: els.runs,
    empty: els.runsEmpty,
    messages: els.messages,
    renderText,
    timeOf,
    token: () => load(TOKEN_KEY),
    onCount: showRunCount,
    onShowResult: () => setRunsOpen(false),
  });

  // On a narrow screen the panel is a sheet over the conversation, opened from a badge in
  // the header, so runs never take the conversation's room (CSS decides what is narrow).
  function setRunsOpen(open) {
    document.body.classList.toggle("runs-open", open);
    els.runsToggle.setAttribute("aria-expanded", String(open));
  }

  const counts = { total: 0, active: 0, jobs: 0 };

  function showRunCount({ total, active }) {
    counts.total = total;
    counts.active = active;
    els.runsCount.textContent = String(total);
    els.runsToggle.dataset.active = String(active);
    labelToggle();
  }

  function showJobCount(jobs) {
    counts.jobs = jobs;
    els.jobsCount.textContent = String(jobs);
    els.jobsBadge.hidden = jobs === 0;
    labelToggle();
  }

  function labelToggle() {
    const { total, active, jobs } = counts;
    const scheduled = jobs ? `; scheduled jobs: ${jobs}` : "";
    els.runsToggle.setAttribute(
      "aria-label",
      `Sub-agent runs: ${total}${active ? `, ${active} not finished` : ""}${scheduled}`,
    );
  }

  els.runsToggle.addEventListener("click", () => {
    setRunsOpen(!document.body.classList.contains("runs-open"));
  });
  els.runsClose.addEventListener("click", () => {
    setRunsOpen(false);
    els.runsToggle.focus();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("runs-open")) {
      setRunsOpen(false);
      els.runsToggle.focus();
    }
  });
  showRunCount({ total: 0, active: 0 });

  // -- scheduled jobs (jobs.js) -------------------------------------------------------------
  //
  // Asked for when the page connects, and again whenever something may have changed them:
  // a reply (the agent's schedule tool, /unschedule), an announce or a run's new status (a
  // job ran; its next run moved), the tab coming back into view.

  const jobsList = window.HeraldJobs.createList({
    section: els.jobs,
    list: els.jobsList,
    note: els.jobsNote,
    send: (frame) => {
      if (!ready || !ws) return false;
      ws.send(JSON.stringify(frame));
      return true;
    },
    onCount: showJobCount,
  });

  // -- views: the chat, or the Sessions view (#sessions, #sessions/<session key>) ------------

  const sessions = window.HeraldSessions.createBrowser({
    renderText,
    token: () => load(TOKEN_KEY),
  });

  function route() {
    const hash = window.location.hash;
    const inSessions = hash === "#sessions" || hash.startsWith("#sessions/");
    document.body.dataset.view = inSessions ? "sessions" : "chat";
    els.chatView.hidden = inSessions;
    els.sessionsView.hidden = !inSessions;
    els.navChat.toggleAttribute("aria-current", !inSessions);
    els.navSessions.toggleAttribute("aria-current", inSessions);
    if (inSessions) {
      setRunsOpen(false);
      const key = hash.startsWith("#sessions/") ? hash.slice("#sessions/".length) : "";
      let decoded = null;
      try {
        decoded = key ? decodeURIComponent(key) : null;
      } catch {
        decoded = null;
      }
      sessions.show(decoded);
    }
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
    els.statusText.textContent = text;
    els.status.title = text;
  }

  function setReady(value) {
    ready = value;
    els.send.disabled = !value;
    if (!value) setTyping(false);
  }

  function setTyping(on) {
    els.typing.hidden = !on;
  }

  // An error about the connection stays until the page is connected again; others fade.
  function showError(text, { untilReady = false } = {}) {
    els.error.textContent = text;
    els.error.hidden = false;
    clearTimeout(errorTimer);
    if (!untilReady) errorTimer = setTimeout(clearError, 8000);
  }

  function clearError() {
    clearTimeout(errorTimer);
    els.error.hidden = true;
    els.error.textContent = "";
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
        // Replies still being written come again (whole) after the replay; others ended.
        for (const entry of streams.values()) entry.el.remove();
        streams.clear();
        backoff = BACKOFF_FIRST;
        els.auth.hidden = true;
        setReady(true);
        setStatus("online", "Connected");
        clearError(); // whatever went wrong before the reconnect is over
        jobsList.reset();
        jobsList.refresh();
        break;
      case "message":
        // The replay after a reconnect repeats messages, and an announce resent after a
        // gateway restart keeps its id: each id is shown once.
        if (seen.has(frame.id)) break;
        seen.add(frame.id);
        renderMessage(frame);
        if (frame.kind !== "user") jobsList.refresh();
        break;
      case "run":
        runsPanel.upsert(frame);
        jobsList.refresh();
        break;
      case "jobs":
        jobsList.receive(frame);
        break;
      case "typing":
        setTyping(frame.on === true);
        break;
      case "delta":
        growReply(frame);
        break;
      case "error":
        if (jobsList.refused(frame)) break;
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
      showError("Not connected yet — your message is still in the box.", { untilReady: true });
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
    if (!tokenFromFragment()) {
      route();
      return;
    }
    route();
    if (ws) return;
    els.auth.hidden = true;
    backoff = BACKOFF_FIRST;
    connect();
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState !== "visible") return;
    reconnectNow();
    jobsList.refresh();
  });

  tokenFromFragment();
  route();
  grow();
  connect();
})();
