// Herald web chat: this chat's scheduled jobs, each with its next run (in the browser's
// local time) and a Cancel button. Vanilla JS, no build step; app.js creates the list, sends
// the "jobs" and "unschedule" frames it asks for, and feeds it the "jobs" frames and the
// refusals of the protocol (channels/webchat/protocol.py). Text is only ever put into the
// page as text nodes, never parsed as HTML.
(() => {
  "use strict";

  const { el } = window.HeraldDom;

  // When the gateway cannot answer yet (it is starting), ask again after this, doubling.
  const RETRY_FIRST_MS = 2000;
  const RETRY_MAX_MS = 60000;
  // A refusal stays in the list's status line this long.
  const NOTE_MS = 8000;

  const DATE_FORMAT = {
    weekday: "short",
    day: "numeric",
    month: "short",
    hour: "2-digit",
    minute: "2-digit",
  };

  function triggerText(trigger) {
    if (!trigger || typeof trigger !== "object") return "";
    if (typeof trigger.every === "string") return `every ${trigger.every}`;
    if (typeof trigger.cron === "string") {
      return `cron ${trigger.cron}${trigger.timezone ? ` (${trigger.timezone})` : ""}`;
    }
    if (typeof trigger.at === "string") return "once";
    return "";
  }

  function nameOf(job) {
    return typeof job.label === "string" && job.label ? job.label : String(job.task || job.jobId);
  }

  // options: section (shown while the chat has jobs), list (its <ul>), note (a status line),
  // send(frame) (false when not connected), onCount(n), all from app.js.
  function createList(options) {
    const items = new Map(); // jobId → { li, job }
    let inFlight = false;
    let again = false;
    let retryTimer = null;
    let retryDelay = RETRY_FIRST_MS;
    let noteTimer = null;

    // Several reasons to ask may come at once (a replay, a turn's frames): one request is
    // out at a time, and one more follows it when something asked meanwhile.
    function refresh() {
      if (inFlight) {
        again = true;
        return;
      }
      if (options.send({ type: "jobs" })) {
        inFlight = true;
        again = false;
      }
    }

    function reset() {
      inFlight = false;
      again = false;
    }

    function setNote(text) {
      clearTimeout(noteTimer);
      options.note.textContent = text;
      options.note.hidden = !text;
      if (text) noteTimer = setTimeout(() => setNote(""), NOTE_MS);
    }

    function newItem(jobId) {
      const meta = el("span", "job-meta", el("span", "job-trigger"), el("span", "job-next"));
      const li = el("li", "job", el("div", "job-main", el("span", "job-name"), meta));
      li.dataset.jobId = jobId;
      return li;
    }

    function cancelButton(li) {
      const button = window.HeraldDom.button("job-cancel");
      // A first click asks to confirm; the question stays until the second click or until
      // the button loses focus (no timer: a slow second click still counts).
      const calm = () => {
        button.classList.remove("confirming");
        button.textContent = "Cancel";
        button.setAttribute("aria-label", `Cancel the scheduled job “${li.dataset.name}”`);
      };
      button.addEventListener("click", () => {
        if (!button.classList.contains("confirming")) {
          button.classList.add("confirming");
          button.textContent = "Confirm";
          button.setAttribute("aria-label", `Confirm: cancel the scheduled job “${li.dataset.name}”`);
          return;
        }
        if (!options.send({ type: "unschedule", jobId: li.dataset.jobId })) {
          calm();
          setNote("Not connected: the job was not cancelled.");
          return;
        }
        button.disabled = true;
        button.textContent = "Cancelling…";
      });
      button.addEventListener("blur", () => {
        if (!button.disabled) calm();
      });
      button.calm = calm;
      return button;
    }

    function update(li, job) {
      const name = nameOf(job);
      li.dataset.name = name;
      const nameEl = li.querySelector(".job-name");
      nameEl.textContent = name;
      nameEl.title = `${String(job.task || "")}\n(job ${li.dataset.jobId})`;
      li.querySelector(".job-trigger").textContent = triggerText(job.trigger);
      const next = li.querySelector(".job-next");
      next.replaceChildren();
      if (job.paused) {
        next.textContent = "paused";
        next.classList.add("paused");
      } else if (typeof job.nextRunAt === "number") {
        next.classList.remove("paused");
        const date = new Date(job.nextRunAt * 1000);
        const time = document.createElement("time");
        time.dateTime = date.toISOString();
        time.textContent = date.toLocaleString([], DATE_FORMAT);
        time.title = date.toString();
        next.append("next ", time);
      } else {
        next.classList.remove("paused");
        next.textContent = "no next run";
      }
      let action = li.querySelector(".job-cancel, .job-declared");
      const wanted = job.declared ? "job-declared" : "job-cancel";
      if (!action || !action.classList.contains(wanted)) {
        const made = job.declared ? declaredTag() : cancelButton(li);
        if (action) action.replaceWith(made);
        else li.append(made);
        action = made;
      }
      if (action.calm && !action.disabled && !action.classList.contains("confirming")) {
        action.calm(); // its label follows the job's name
      }
    }

    function declaredTag() {
      const why = el("span", "visually-hidden", ": declared in the config file, cancelled only there");
      const tag = el("span", "job-declared", "config", why);
      tag.title = "Declared in the config file: change or remove it there.";
      return tag;
    }

    // Items are kept and updated in place (a focused button keeps its focus); new ones are
    // put in the order the gateway sent (soonest next run first).
    function show(jobs) {
      const wanted = new Set(jobs.map((job) => String(job.jobId)));
      for (const [jobId, entry] of items) {
        if (!wanted.has(jobId)) {
          entry.li.remove();
          items.delete(jobId);
        }
      }
      let previous = null;
      for (const job of jobs) {
        const jobId = String(job.jobId);
        let entry = items.get(jobId);
        if (!entry) {
          entry = { li: newItem(jobId) };
          items.set(jobId, entry);
        }
        update(entry.li, job);
        const at = previous ? previous.nextSibling : options.list.firstChild;
        if (at !== entry.li) options.list.insertBefore(entry.li, at);
        previous = entry.li;
      }
      options.section.hidden = jobs.length === 0;
      options.onCount(jobs.length);
    }

    // A "jobs" frame: the chat's whole list.
    function receive(frame) {
      inFlight = false;
      retryDelay = RETRY_FIRST_MS;
      clearTimeout(retryTimer);
      retryTimer = null;
      show(Array.isArray(frame.jobs) ? frame.jobs.filter((j) => j && j.jobId) : []);
      if (again) refresh();
    }

    // An error frame about jobs; true when it was one.
    function refused(frame) {
      if (frame.code === "jobs_unavailable") {
        inFlight = false;
        if (!retryTimer) {
          retryTimer = setTimeout(() => {
            retryTimer = null;
            refresh();
          }, retryDelay);
          retryDelay = Math.min(retryDelay * 2, RETRY_MAX_MS);
        }
        return true;
      }
      if (frame.code !== "job_not_found" && frame.code !== "job_declared") return false;
      const entry = items.get(String(frame.jobId));
      if (entry) {
        const button = entry.li.querySelector(".job-cancel");
        if (button) {
          button.disabled = false;
          button.calm();
        }
      }
      setNote(`Not cancelled: ${String(frame.message || frame.code)}`);
      refresh(); // it may be gone already, or changed
      return true;
    }

    setNote("");
    return { refresh, reset, receive, refused };
  }

  window.HeraldJobs = { createList };
})();
