// dsh web: the page. It calls only the public HTTP API (the same one a script would use),
// with the token from its own URL. No framework, no build step; DOM built with textContent
// only, so nothing the agent or a tool says can become markup.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const state = { session: null, source: null, bubbles: new Map(), calls: new Map() };
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || response.statusText;
    showError(`${method} ${path}: ${response.status} ${message}`);
    throw new Error(message);
  }
  showError("");
  return data;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

// -- sessions ----------------------------------------------------------------------------

async function loadSessions() {
  const { sessions } = await api("GET", "/api/sessions");
  const list = $("sessions");
  list.replaceChildren();
  for (const s of sessions) {
    const item = el("li", s.sessionId === state.session ? "active" : "", s.title || s.sessionId);
    item.dataset.id = s.sessionId;
    item.title = `${s.sessionId}\n${s.cwd}`;
    item.append(el("span", "status", s.status));
    item.addEventListener("click", () => select(s.sessionId));
    list.append(item);
  }
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
  $("log").replaceChildren();
  renderPlan([]);
  $("session-title").textContent = sessionId;
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
// model's reasoning (created when reasoning arrives, closed unless opened), then the answer.
function bubble(data) {
  const key = `${data.turn}:${data.step}`;
  let node = state.bubbles.get(key);
  if (!node) {
    node = append(el("div", "msg assistant"));
    node.append(el("div", "answer", ""));
    state.bubbles.set(key, node);
  }
  return node;
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

function onEvent(event) {
  const data = event.data || {};
  switch (event.type) {
    case "user/message":
      if (!data.source || data.source.kind === "user") append(el("div", "msg user", textOf(data.content)));
      break;
    case "assistant/delta":
      bubble(data).querySelector(".answer").textContent += data.text;
      break;
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
      node.querySelector(".answer").textContent = text;
      if (reasoning) thinking(node).textContent = reasoning;
      if (!text && !reasoning) node.remove();
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
      break;
    }
    case "turn/end": {
      const reason = data.reason || {};
      const detail = reason.error ? `: ${reason.error.message}` : "";
      append(el("div", "turn-end", `turn ${data.turn} ${reason.kind}${detail}`));
      break;
    }
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
}

start().catch((e) => showError(String(e)));
