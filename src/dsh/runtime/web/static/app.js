// dsh web: the page. It calls only the public HTTP API (the same one a script would use),
// with the token from its own URL. No framework, no build step. Answers are rendered as
// sanitized Markdown by render.js; everything else is built with textContent only, so
// nothing the agent or a tool says can become markup.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const state = {
  session: null, source: null, bubbles: new Map(), calls: new Map(), sessions: [],
  turns: new Map(), total: null, banner: { api: null, turn: null },
};
const $ = (id) => document.getElementById(id);
const el = dshRender.el;
const RENDER_EVERY_MS = 80;  // a streamed answer is re-rendered at most this often

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    showBanner("api", { title: "dsh web is not reachable", message: String(e),
      hint: "Is `dsh web` still running? Restart it and open the URL it prints." });
    throw e;
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error || {};
    showBanner("api", { title: `${method} ${path} failed (${response.status})`,
      message: error.message || response.statusText, hint: error.hint || "" });
    throw new Error(error.message || response.statusText);
  }
  showBanner("api", null);
  return data;
}

// The red banner: a failed request, else the selected session's last turn error. A
// successful request clears only the former; the next turn (or dismissing it) the latter.
function showBanner(kind, problem) {
  state.banner[kind] = problem;
  const shown = state.banner.api || state.banner.turn;
  $("error").hidden = !shown;
  if (!shown) return;
  $("error").className = state.banner.api ? "api" : "turn";
  $("error-title").textContent = shown.title;
  $("error-message").textContent = shown.message || "";
  $("error-hint").textContent = shown.hint || "";
  $("error-hint").hidden = !shown.hint;
}

function showError(text) {
  showBanner("api", text ? { title: "Error", message: text } : null);
}

// -- sessions ----------------------------------------------------------------------------

async function loadSessions() {
  const { sessions } = await api("GET", "/api/sessions");
  state.sessions = sessions;
  renderSessions();
}

// When the listing has summaries (updatedAt or createdAt, turns, costUsd), the list is
// newest first and says how old, how long and how costly each session is; without them it
// is the server's order with titles and status only.
function renderSessions() {
  const needle = $("session-filter").value.trim().toLowerCase();
  const stamp = (s) => {
    const value = s.updatedAt ?? s.createdAt;
    const ms = typeof value === "number" ? (value < 1e12 ? value * 1000 : value) : Date.parse(value);
    return Number.isFinite(ms) ? ms : null;
  };
  const sessions = [...state.sessions];
  if (sessions.some((s) => stamp(s) !== null)) {
    sessions.sort((a, b) => (stamp(b) ?? 0) - (stamp(a) ?? 0));
  }
  const list = $("sessions");
  list.replaceChildren();
  const now = Date.now();
  for (const s of sessions) {
    const haystack = `${s.title || ""} ${s.sessionId} ${s.cwd || ""}`.toLowerCase();
    if (needle && !haystack.includes(needle)) continue;
    const item = el("li", s.sessionId === state.session ? "active" : "");
    item.dataset.id = s.sessionId;
    item.append(el("span", "title", s.title || s.sessionId));
    const meta = el("div", "meta");
    const age = dshRender.age(s.updatedAt ?? s.createdAt, now);
    if (age) meta.append(el("span", "age", age));
    if (typeof s.turns === "number") {
      meta.append(el("span", "turns", `${s.turns} turn${s.turns === 1 ? "" : "s"}`));
    }
    // A route without prices reports no cost: 0 here means "not priced", not "free".
    if (typeof s.costUsd === "number" && s.costUsd > 0) {
      meta.append(el("span", "cost", dshRender.money(s.costUsd)));
    }
    meta.append(el("span", "status", s.status));
    for (const part of [...meta.children].slice(1)) part.before(" · ");
    item.append(meta);
    const when = dshRender.when(s.updatedAt ?? s.createdAt);
    item.title = [s.title, s.sessionId, s.cwd, when && `updated ${when}`]
      .filter(Boolean).join("\n");
    item.addEventListener("click", () => select(s.sessionId));
    list.append(item);
  }
  if (!list.children.length && state.sessions.length) {
    list.append(el("li", "empty", "no session matches"));
  }
  const current = state.sessions.find((s) => s.sessionId === state.session);
  if (current && current.title) $("session-title").textContent = current.title;
}

async function newSession() {
  const { sessionId } = await api("POST", "/api/sessions", {});
  await select(sessionId);
  return sessionId;
}

async function select(sessionId) {
  if (state.source) state.source.close();
  state.session = sessionId;
  state.bubbles.clear();
  state.calls.clear();
  state.turns.clear();
  state.total = { ...dshRender.tally(), turns: 0 };
  showBanner("turn", null);
  $("log").replaceChildren();
  renderPlan([]);
  renderTotal();
  const known = state.sessions.find((s) => s.sessionId === sessionId);
  $("session-title").textContent = (known && known.title) || sessionId;
  $("session-title").title = sessionId;
  const url = `/api/sessions/${encodeURIComponent(sessionId)}/events?since=0&token=` +
    encodeURIComponent(token);
  const source = new EventSource(url);
  state.source = source;
  source.addEventListener("open", () => setConnection("live"));
  source.addEventListener("error", () => setConnection("reconnecting"));
  source.addEventListener("session.event", (e) => onEvent(JSON.parse(e.data).event));
  source.addEventListener("session.status", (e) => onStatus(JSON.parse(e.data).status));
  source.addEventListener("approval", () => loadApprovals());
  source.addEventListener("config", () => loadConfig());
  await loadSessions();
  await loadApprovals();
}

function setConnection(text) {
  $("connection").textContent = text;
  $("connection").className = "badge " + (text === "live" ? "live" : "");
}

function onStatus(status) {
  $("session-status").textContent = status;
  $("session-status").className = "badge " + status;
  loadSessions().catch(() => {});
}

// -- conversation ------------------------------------------------------------------------

function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}

function append(node) {
  const log = $("log");
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  log.append(node);
  if (atEnd) log.scrollTop = log.scrollHeight;
  return node;
}

// One assistant bubble per turn and step: a collapsible "thinking" section for the
// model's reasoning (created when reasoning arrives, closed unless opened), then the answer,
// rendered from Markdown (render.js); while it streams, at most every RENDER_EVERY_MS.
function bubble(data) {
  const key = `${data.turn}:${data.step}`;
  let node = state.bubbles.get(key);
  if (!node) {
    node = append(el("div", "msg assistant"));
    node.append(el("div", "answer", ""));
    node.dsh = { text: "", timer: null };
    state.bubbles.set(key, node);
  }
  return node;
}

function setAnswer(node, text, now) {
  node.dsh.text = text;
  if (now) {
    clearTimeout(node.dsh.timer);
    node.dsh.timer = null;
    renderAnswer(node);
  } else if (node.dsh.timer === null) {
    node.dsh.timer = setTimeout(() => { node.dsh.timer = null; renderAnswer(node); },
      RENDER_EVERY_MS);
  }
}

function renderAnswer(node) {
  const log = $("log");
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  const answer = node.querySelector(".answer");
  answer.replaceChildren(dshRender.answer(node.dsh.text));
  answer.dataset.length = String(node.dsh.text.length);
  if (atEnd) log.scrollTop = log.scrollHeight;
}

// -- usage -------------------------------------------------------------------------------

function turnOf(number) {
  let turn = state.turns.get(number);
  if (!turn) {
    turn = { ...dshRender.tally(), started: null };
    state.turns.set(number, turn);
  }
  return turn;
}

function renderTotal() {
  const total = state.total;
  $("session-usage").textContent = total && total.turns
    ? `${total.turns} turn${total.turns === 1 ? "" : "s"} · ${dshRender.usageText(total)}` : "";
}

const FAILURES = { "max-tokens": "The model stopped at its output token limit",
  cancelled: "The turn was cancelled" };

function turnEnded(data, time) {
  const reason = data.reason || {};
  const turn = turnOf(data.turn);
  const parts = [`turn ${data.turn} ${reason.kind === "error" ? "failed" : reason.kind}`,
    `${turn.steps} step${turn.steps === 1 ? "" : "s"}`, dshRender.usageText(turn)];
  if (turn.started !== null && time) parts.push(dshRender.duration(time - turn.started));
  append(el("div", "turn-end", parts.join(" · ")));
  state.total.turns += 1;
  renderTotal();
  if (reason.kind === "completed" || reason.kind === "cancelled") return;
  const error = reason.error || {};
  const problem = {
    title: `Turn ${data.turn} failed` + (error.code ? ` (${error.code})` : ""),
    message: error.message || FAILURES[reason.kind] || `the turn ended: ${reason.kind}`,
    hint: error.hint || "",
  };
  const card = append(el("div", "msg error turn-error"));
  card.setAttribute("role", "alert");
  card.append(el("strong", "", problem.title), el("div", "message", problem.message));
  if (problem.hint) card.append(el("div", "hint", problem.hint));
  showBanner("turn", problem);
}

function thinking(node) {
  let section = node.querySelector("details.thinking");
  if (!section) {
    section = el("details", "thinking");
    section.append(el("summary", "", "thinking"), el("div", "thinking-text", ""));
    node.prepend(section);
  }
  return section.querySelector(".thinking-text");
}

function reasoningOf(content) {
  return (content || []).filter((b) => b.type === "reasoning").map((b) => b.text || "").join("\n\n");
}

// The log stays pinned to its end while it is there: results, diffs and reasoning grow
// nodes already shown, not only the end of the log.
function onEvent(event) {
  const log = $("log");
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  handle(event);
  if (atEnd) log.scrollTop = log.scrollHeight;
}

function handle(event) {
  const data = event.data || {};
  switch (event.type) {
    case "user/message":
      if (!data.source || data.source.kind === "user") append(el("div", "msg user", textOf(data.content)));
      break;
    case "turn/start":
      turnOf(data.turn).started = event.time || null;
      showBanner("turn", null);
      break;
    case "step/start":
      turnOf(data.turn).steps += 1;
      break;
    case "assistant/delta": {
      const node = bubble(data);
      setAnswer(node, node.dsh.text + data.text, false);
      break;
    }
    case "assistant/reasoning-delta":
      thinking(bubble(data)).textContent += data.text;
      break;
    case "assistant/retry": {
      // The stream broke off: what it showed is void, the step is asked again.
      const key = `${data.turn}:${data.step}`;
      const node = state.bubbles.get(key);
      if (node) node.remove();
      state.bubbles.delete(key);
      break;
    }
    case "assistant/message": {
      const content = data.message.content;
      const text = textOf(content);
      const reasoning = reasoningOf(content);
      const node = bubble(data);
      setAnswer(node, text, true);
      if (reasoning) thinking(node).textContent = reasoning;
      if (!text && !reasoning) node.remove();
      dshRender.add(turnOf(data.turn), data.usage);
      dshRender.add(state.total, data.usage);
      renderTotal();
      break;
    }
    case "tool/call": {
      const node = append(el("div", "tool-call"));
      node.dataset.callId = data.callId;
      node.append(el("div", "call", `${data.name}(${data.arguments})`));
      state.calls.set(data.callId, node);
      break;
    }
    case "tool/result": {
      const message = data.message || {};
      const node = state.calls.get(message.toolCallId) || append(el("div", "tool-call"));
      if (message.isError) node.classList.add("failed");
      node.append(el("div", "result", textOf(message.content)));
      if (data.diff && typeof data.diff === "object") node.append(dshRender.diff(data.diff));
      break;
    }
    case "turn/end":
      turnEnded(data, event.time);
      break;
    case "error":
      append(el("div", "msg error", data.message));
      break;
    case "warning":
      append(el("div", "msg warning", data.message));
      break;
    case "plan/update":
      renderPlan(data.entries || []);
      break;
    case "mode/update":
      append(el("div", "turn-end", `mode: ${data.mode}`));
      break;
    default:
      break;
  }
}

// The session's task list (todo_write): each plan/update replaces it whole.
const PLAN_MARKS = { pending: "\u25cb", in_progress: "\u25d0", completed: "\u25cf" };

function renderPlan(entries) {
  const box = $("plan");
  box.replaceChildren();
  box.hidden = entries.length === 0;
  if (!entries.length) return;
  box.append(el("strong", "", "Plan"));
  const list = el("ul");
  for (const entry of entries) {
    const item = el("li", entry.status, `${PLAN_MARKS[entry.status] || "\u25cb"} ${entry.content}`);
    if (entry.priority) item.append(el("span", "priority", ` ${entry.priority}`));
    list.append(item);
  }
  box.append(list);
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  const sessionId = state.session || (await newSession());
  await api("POST", `/api/sessions/${encodeURIComponent(sessionId)}/prompt`,
    { contentBlocks: [{ type: "text", text }] });
  $("prompt").value = "";
}

async function cancelTurn() {
  if (state.session) await api("POST", `/api/sessions/${encodeURIComponent(state.session)}/cancel`, {});
}

// -- approvals ---------------------------------------------------------------------------

async function loadApprovals() {
  const { approvals } = await api("GET", "/api/approvals");
  const box = $("approvals");
  box.replaceChildren();
  for (const a of approvals) {
    const card = el("div", "approval");
    card.dataset.id = a.approvalId;
    const call = a.toolCall || {};
    card.append(el("strong", "", `Allow ${call.name}?`));
    if (a.sessionId !== state.session) card.append(el("span", "", ` (session ${a.sessionId})`));
    card.append(el("code", "", call.arguments || ""));
    if (call.reason) card.append(el("div", "reason", call.reason));
    for (const decision of ["allow", "deny"]) {
      const button = el("button", decision === "allow" ? "approve" : "deny",
        decision === "allow" ? "Approve" : "Deny");
      button.type = "button";
      button.addEventListener("click", async () => {
        button.disabled = true;
        await api("POST", `/api/approvals/${encodeURIComponent(a.approvalId)}`, { decision })
          .finally(() => loadApprovals());
      });
      card.append(button, " ");
    }
    box.append(card);
  }
}

// -- config and tools --------------------------------------------------------------------

function show(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function renderRow(row) {
  const box = el("div", "row" + (row.disabled ? " disabled" : ""));
  box.dataset.id = row.id;
  const title = el("h3", "", row.id);
  title.append(el("span", "name", row.group ? "group" : row.name || ""));
  box.append(title);
  const table = el("table");
  const provenance = row.provenance || {};
  const fields = [];
  if (!row.group && row.config && typeof row.config === "object") {
    for (const [key, value] of Object.entries(row.config)) fields.push([`config.${key}`, value]);
  }
  for (const key of ["name", "inject", "disabled", "tags"]) {
    if (row[key] !== undefined) fields.push([key, row[key]]);
  }
  for (const [key, value] of fields) {
    const tr = el("tr");
    tr.append(el("td", "key", key), el("td", "value", show(value)),
      el("td", "source", provenance[key] || provenance[key.split(".")[0]] || ""));
    table.append(tr);
  }
  box.append(table);
  if (row.group && Array.isArray(row.config)) {
    const children = el("div", "children");
    for (const child of row.config) children.append(renderRow(child));
    box.append(children);
  }
  return box;
}

async function loadConfig() {
  const { config, patchReload, reloadRequired } = await api("GET", "/api/config");
  $("config-meta").textContent = `profile ${config.profile}, patch-reload ${patchReload}` +
    (reloadRequired ? ", restart required to apply changes" : "") + ", layers: " +
    (config.layers || []).map((l) => l.source).join(" > ");
  $("config").replaceChildren(...(config.rows || []).map(renderRow));
}

async function loadTools() {
  const { tools } = await api("GET", "/api/tools");
  $("tools").replaceChildren(...tools.map((t) => {
    const item = el("li");
    item.append(el("strong", "", t.name), ": " + t.description);
    return item;
  }));
}

function showView(name) {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.classList.toggle("active", button.dataset.view === name);
  }
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== "view-" + name;
  if (name === "config") loadConfig();
  if (name === "tools") loadTools();
}

// -- start -------------------------------------------------------------------------------

async function start() {
  $("new-session").addEventListener("click", () => newSession());
  $("session-filter").addEventListener("input", renderSessions);
  $("error-dismiss").addEventListener("click", () => {
    showBanner("api", null);
    showBanner("turn", null);
  });
  $("prompt-form").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("prompt-form").requestSubmit();
  });
  $("cancel").addEventListener("click", cancelTurn);
  $("refresh-config").addEventListener("click", loadConfig);
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => showView(button.dataset.view));
  }
  const status = await api("GET", "/api/status");
  $("profile").textContent = `profile ${status.profile}`;
  setConnection("ready");
  await loadSessions();
  await loadApprovals();
  // The effective config moves with live reload; refresh it while it is on screen.
  setInterval(() => { if (!$("view-config").hidden) loadConfig().catch(() => {}); }, 3000);
  setInterval(renderSessions, 30000);  // "5 min ago" grows older
}

start().catch((e) => showError(String(e)));
