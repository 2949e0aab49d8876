// sandlot playground: a small client of sandlot's public API only. It speaks MCP Streamable HTTP at /mcp
// (initialize, sandbox.list_runners, sandbox.run_code with live output and, with "Session" ticked, session: true;
// sandbox_session to restart or close the live sandbox; notifications/cancelled to stop), reads the run history from
// GET /v1/runs and the live sandbox from GET /v1/conversations/{id}. No framework, no build step, nothing fetched
// from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const ui = {
  keyForm: $("key-form"), key: $("api-key"), connect: $("connect"), remember: $("remember"), language: $("language"),
  conversation: $("conversation"), newConversation: $("new-conversation"), editor: $("editor"), gutter: $("gutter"),
  run: $("run"), stop: $("stop"), runStatus: $("run-status"), elapsed: $("elapsed"), connection: $("connection"),
  error: $("error"), summary: $("summary"), output: $("output"), files: $("files"), filesNote: $("files-note"),
  previews: $("previews"), history: $("history"), historyNote: $("history-note"), uploadFile: $("upload-file"),
  uploadStatus: $("upload-status"), session: $("session"), liveNote: $("live-note"), liveProcesses: $("live-processes"),
  liveRestart: $("live-restart"), liveClose: $("live-close"),
};

const STARTERS = {
  python: `# Files written to the working directory (/data) stay with this conversation.
import time

values = [3, 7, 4, 9, 6]
for i, v in enumerate(values):
    print(f"step {i}: {v}", flush=True)
    time.sleep(0.2)

bars = "".join(f'<rect x="{i * 22}" y="{100 - v * 10}" width="18" height="{v * 10}" fill="#4c9cff"/>'
               for i, v in enumerate(values))
with open("chart.svg", "w") as f:
    f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="110" height="100">{bars}</svg>')
print("wrote chart.svg")
`,
  javascript: `// Files written to the working directory (/data) stay with this conversation.
const fs = require("node:fs");

console.log(\`Hello from Node \${process.version}!\`);
fs.writeFileSync("hello.txt", "written in the sandlot playground\\n");
console.log("wrote hello.txt");
`,
  typescript: `// Files written to the working directory (/data) stay with this conversation.
import { writeFileSync } from "node:fs";

const greet = (name: string): string => \`Hello, \${name}!\`;
console.log(greet("TypeScript"));
writeFileSync("hello.txt", "written in the sandlot playground\\n");
console.log("wrote hello.txt");
`,
  bash: `# Files written to the working directory (/data) stay with this conversation.
echo "Hello from bash $BASH_VERSION"
date > now.txt
ls -l
`,
};
// Shown before the server has said which runners it has.
const DEFAULT_LANGUAGES = Object.keys(STARTERS).map((language) => ({ language }));

const OUTCOMES = {
  ok: ["Succeeded", "ok", () => "The program finished successfully."],
  error: ["Failed", "bad", (r) => `The program exited with code ${r.exitCode}.`],
  timeout: ["Timed out", "bad", () => "The program ran past its time limit and was stopped."],
  oom: ["Out of memory", "bad", () => "The program used more memory than it may and was stopped."],
  cancelled: ["Cancelled", "warn", () => "The run was stopped."],
  queued: ["Queued", "neutral", () => "The run is waiting for a free slot."],
  running: ["Running", "neutral", () => "The run has not finished yet."],
  busy: ["Server busy", "warn", () => "The server was too busy to start the run."],
  interrupted: ["Interrupted", "warn", () => "The server stopped before the run finished."],
  internal: ["Server error", "bad", () => "sandlot hit an internal error; its log has the details."],
};
const IMAGE = /\.(png|jpe?g|gif|svg|webp)$/i;
const CSV = /\.(csv|tsv)$/i;
const TEXT = /\.(txt|md|json|log|py|js|ts|sh|html|css|xml|ya?ml|toml|ini)$/i;
const PREVIEW_BYTES = 64 * 1024; // text and CSV previews read at most this much of a file
const PREVIEW_ROWS = 50;
const UPLOAD_BYTES = 1024 * 1024; // what one sandbox_upload_file call carries over /mcp (its body limit is 1 MiB)

// Storage: the key lives in sessionStorage (this tab), and in localStorage only when "remember" is ticked.

const KEY = "sandlot.apiKey";
const stored = (name) => sessionStorage.getItem(`sandlot.${name}`);
const store = (name, value) => sessionStorage.setItem(`sandlot.${name}`, value);
const drafts = JSON.parse(stored("drafts") || "{}"); // language → code typed in this tab

function saveKey() {
  sessionStorage.setItem(KEY, ui.key.value);
  if (ui.remember.checked) localStorage.setItem(KEY, ui.key.value);
  else localStorage.removeItem(KEY);
}

// The MCP client.

// An HTTP status other than 2xx (401 wrong key, 429 locked out, 404 session gone, ...).
class HttpError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    Object.assign(this, { status, retryAfter });
  }
}
// A JSON-RPC error response: { code, message, data }.
class RpcError extends Error {
  constructor({ code, message, data }) {
    super(message);
    Object.assign(this, { code, data });
  }
}
// The server could not be reached, or a stream ended before the response.
class LostConnection extends Error {}

const mcp = { ready: null, session: null, protocol: "2025-06-18", nextId: 1, logging: false, key: null, listener: null };

function headers() {
  const session = mcp.session ? { "Mcp-Session-Id": mcp.session, "MCP-Protocol-Version": mcp.protocol } : {};
  const accept = "application/json, text/event-stream";
  return { "Content-Type": "application/json", Accept: accept, Authorization: `Bearer ${mcp.key}`, ...session };
}

async function failure(response) {
  const body = await response.json().catch(() => ({}));
  if (body.error && typeof body.error === "object") return new RpcError(body.error);
  const retryAfter = Number(response.headers.get("Retry-After")) || 0;
  return new HttpError(response.status, body.message || response.statusText, retryAfter);
}

async function post(message, signal) {
  let response;
  try {
    response = await fetch("/mcp", { method: "POST", headers: headers(), body: JSON.stringify(message), signal });
  } catch (error) {
    throw error.name === "AbortError" ? error : new LostConnection();
  }
  if (!response.ok) throw await failure(response);
  return response;
}

// Yields the JSON-RPC messages of an SSE body: events are separated by blank lines, their `data:` lines joined;
// events without data (rmcp's priming event) are skipped.
async function* sseMessages(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r/g, "");
      for (let end; (end = buffer.indexOf("\n\n")) >= 0; buffer = buffer.slice(end + 2)) {
        const data = buffer.slice(0, end).split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (data.trim()) yield JSON.parse(data);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// The result of request `id` from a JSON or SSE response; notifications on the way go to `onNotification`.
async function readResponse(response, id, onNotification = () => {}) {
  const unwrap = (message) => {
    if (message.error) throw new RpcError(message.error);
    return message.result;
  };
  if (!(response.headers.get("Content-Type") || "").includes("text/event-stream")) return unwrap(await response.json());
  try {
    for await (const message of sseMessages(response.body)) {
      if (message.id === id && ("result" in message || "error" in message)) return unwrap(message);
      if (message.method) onNotification(message);
    }
  } catch (error) {
    if (error.name === "AbortError" || error instanceof RpcError) throw error;
    throw new LostConnection();
  }
  throw new LostConnection(); // the stream ended without the response
}

async function send(method, params, { signal, onNotification, onId } = {}) {
  const id = mcp.nextId++;
  onId?.(id);
  const response = await post({ jsonrpc: "2.0", id, method, params }, signal);
  return readResponse(response, id, onNotification);
}

async function notify(method, params) {
  await post({ jsonrpc: "2.0", method, ...(params && { params }) });
}

async function initialize() {
  mcp.session = null;
  const id = mcp.nextId++;
  const params = {
    protocolVersion: mcp.protocol, capabilities: {}, clientInfo: { name: "sandlot-playground", version: "1" },
  };
  const response = await post({ jsonrpc: "2.0", id, method: "initialize", params });
  mcp.session = response.headers.get("Mcp-Session-Id");
  const result = await readResponse(response, id);
  mcp.protocol = result.protocolVersion || mcp.protocol;
  await notify("notifications/initialized");
  // With logging on, the server sends output as log messages that tell stdout from stderr.
  const logging = await send("logging/setLevel", { level: "info" }).then(() => true, () => false);
  mcp.logging = logging && (await openListener());
  return result;
}

// Log messages belong to no request, so the server (rmcp) sends them on the session's standalone stream,
// GET /mcp, rather than on the response stream of the tools/call. Opens that stream and resolves once it is open
// (true) or refused (false); when it ends, live output falls back to progress notifications.
async function openListener() {
  const listener = (mcp.listener = new AbortController());
  let response;
  try {
    response = await fetch("/mcp", { headers: headers(), signal: listener.signal });
  } catch {
    return false;
  }
  if (!response.ok || !(response.headers.get("Content-Type") || "").includes("text/event-stream")) return false;
  (async () => {
    for await (const message of sseMessages(response.body)) if (current) onRunNotification(current, message);
  })().catch(() => {}).finally(() => {
    if (mcp.listener === listener) mcp.logging = false;
  });
  return true;
}

// One session per key, opened on first use; a failed attempt is forgotten so the next use tries again.
function connect() {
  if (ui.key.value !== mcp.key) closeSession();
  mcp.key = ui.key.value;
  mcp.ready ??= initialize().catch((error) => {
    mcp.ready = null;
    throw error;
  });
  return mcp.ready;
}

function closeSession() {
  mcp.listener?.abort();
  if (mcp.session) {
    fetch("/mcp", { method: "DELETE", headers: headers(), keepalive: true }).catch(() => {});
  }
  Object.assign(mcp, { ready: null, session: null });
}

// A request in the session; when the server has forgotten the session (404), a new one is opened once.
async function request(method, params, options) {
  await connect();
  try {
    return await send(method, params, options);
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 404)) throw error;
    closeSession();
    await connect();
    return send(method, params, options);
  }
}

// A GET of sandlot's REST API.
async function rest(path) {
  let response;
  try {
    response = await fetch(path, { headers: { Authorization: `Bearer ${mcp.key}` } });
  } catch {
    throw new LostConnection();
  }
  if (!response.ok) throw await failure(response);
  return response.json();
}

// Messages a person understands.

function describe(error) {
  if (error instanceof HttpError) {
    if (error.status === 401) return "The API key was not accepted. Check the key (it is the server’s MCP_API_TOKEN) and connect again.";
    if (error.status === 429) return `Too many wrong keys were tried from this address. Wait ${error.retryAfter || 60} seconds, then try again.`;
    if (error.status === 413) return "The code is too large for the server.";
    return `The server answered ${error.status}: ${error.message}`;
  }
  if (error instanceof RpcError) {
    if (error.data?.field === "conversationId") return `The conversation id is not valid: ${error.message}.`;
    return `The server refused the request: ${error.message}.`;
  }
  if (error instanceof LostConnection) return "Lost connection to the server. Check that sandlot is still running, then try again.";
  return `Something went wrong: ${error.message}`;
}

function showError(text) {
  ui.error.replaceChildren(strong("Error. "), text);
  ui.error.hidden = false;
}

function showFailure(error) {
  const auth = error instanceof HttpError && (error.status === 401 || error.status === 429);
  if (auth) setConnection("Key not accepted", "bad");
  else if (error instanceof LostConnection) setConnection("Connection lost", "bad");
  ui.key.setAttribute("aria-invalid", String(auth));
  showError(describe(error));
}

function setConnection(text, kind = "") {
  ui.connection.textContent = text;
  ui.connection.className = `connection ${kind}`;
}

// Small DOM helpers.

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}
const strong = (text) => el("strong", {}, text);

function badge(outcome) {
  const [label, kind] = OUTCOMES[outcome] || [outcome, "neutral"];
  return el("span", { className: `badge ${kind}` }, label);
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

const formatMs = (ms) => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`);

// "python 3.11.2" from "Python 3.11.2", "bash 5.2.15" from "GNU bash, version 5.2.15(1)-release (...)", but
// "typescript (tsx v4.23.15)" when the version names another program.
function runnerLabel({ language, version }) {
  const number = (version || "").match(/\d+(\.\d+)+/);
  if (!number) return language;
  const upToNumber = version.slice(0, number.index + number[0].length);
  return upToNumber.toLowerCase().includes(language) ? `${language} ${number[0]}` : `${language} (${upToNumber})`;
}

// The editor: a textarea with a line-number gutter. Tab indents (Shift+Tab outdents); after Escape, Tab moves the
// focus on as usual, so keyboard users are never trapped. Enter keeps the current line's indentation.

const INDENT = "    ";
let tabLeaves = false;

function syncGutter() {
  const lines = ui.editor.value.split("\n").length;
  if (ui.gutter.dataset.lines !== String(lines)) {
    ui.gutter.textContent = Array.from({ length: lines }, (_, i) => i + 1).join("\n");
    ui.gutter.dataset.lines = lines;
  }
  ui.gutter.scrollTop = ui.editor.scrollTop;
}

// Replaces the selection with `text`, keeping the browser's undo history where it can.
function insertText(text) {
  if (!document.execCommand("insertText", false, text)) {
    ui.editor.setRangeText(text, ui.editor.selectionStart, ui.editor.selectionEnd, "end");
  }
  syncGutter();
}

// Indents or outdents every line the selection touches.
function shiftLines(outdent) {
  const { value, selectionStart, selectionEnd } = ui.editor;
  const start = value.lastIndexOf("\n", selectionStart - 1) + 1;
  const lines = value.slice(start, selectionEnd).split("\n");
  const shifted = lines.map((line) => (outdent ? line.replace(/^ {1,4}|^\t/, "") : INDENT + line));
  ui.editor.setSelectionRange(start, selectionEnd);
  insertText(shifted.join("\n"));
  ui.editor.setSelectionRange(start, start + shifted.join("\n").length);
}

function onEditorKey(event) {
  if (["Shift", "Control", "Alt", "Meta"].includes(event.key)) return;
  if (event.key === "Escape") {
    tabLeaves = true;
    return;
  }
  const leave = tabLeaves;
  tabLeaves = false;
  if (event.key === "Tab" && !leave && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    const { value, selectionStart, selectionEnd } = ui.editor;
    if (event.shiftKey || value.slice(selectionStart, selectionEnd).includes("\n")) shiftLines(event.shiftKey);
    else insertText(INDENT);
  } else if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    const { value, selectionStart } = ui.editor;
    const line = value.slice(value.lastIndexOf("\n", selectionStart - 1) + 1, selectionStart);
    insertText("\n" + line.match(/^[ \t]*/)[0]);
  }
}

function setCode(code) {
  ui.editor.value = code;
  syncGutter();
}

function saveDraft() {
  drafts[ui.language.value] = ui.editor.value;
  store("drafts", JSON.stringify(drafts));
}

// Languages, from sandbox.list_runners once connected.

function fillLanguages(runners) {
  const current = ui.language.value || stored("language") || "python";
  ui.language.replaceChildren(...runners.map((r) => el("option", { value: r.language }, runnerLabel(r))));
  const available = runners.map((r) => r.language);
  ui.language.value = available.includes(current) ? current : available[0] || "";
  if (ui.language.value !== current) changeLanguage();
}

function changeLanguage() {
  store("language", ui.language.value);
  setCode(drafts[ui.language.value] ?? STARTERS[ui.language.value] ?? "");
}

async function connectAndLoad() {
  ui.error.hidden = true;
  if (!haveKey()) return;
  setConnection("Connecting…");
  try {
    const info = await connect();
    ui.key.setAttribute("aria-invalid", "false");
    const server = info.serverInfo ? `${info.serverInfo.name} ${info.serverInfo.version}` : "sandlot";
    setConnection(`Connected to ${server}`, "ok");
    const runners = await request("tools/call", { name: "sandbox.list_runners", arguments: {} });
    fillLanguages(runners.structuredContent?.languages || []);
    await Promise.all([loadHistory(), loadLive()]);
  } catch (error) {
    showFailure(error);
  }
}

// Conversation ids: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128.

function freshConversation() {
  const day = new Date().toISOString().slice(0, 10).replace(/-/g, "");
  return `play-${day}-${Math.random().toString(36).slice(2, 8)}`;
}

function setConversation(id) {
  ui.conversation.value = id;
  store("conversation", id);
  ui.files.replaceChildren();
  ui.previews.replaceChildren();
  ui.filesNote.textContent = "Files in the conversation’s /data appear here after a run.";
  loadHistory();
  loadLive();
}

// Output.

// Appends a chunk, merging it into the last span when the stream is the same; follows the end only when the
// reader was already there (so scrolling up to read is not undone by new output).
function appendOutput(stream, text) {
  if (!text) return;
  const out = ui.output;
  const atEnd = out.scrollHeight - out.scrollTop - out.clientHeight < 24;
  out.querySelector(".placeholder")?.remove();
  const last = out.lastElementChild;
  if (last?.className === stream) last.append(text);
  else out.append(el("span", { className: stream }, text));
  if (atEnd) out.scrollTop = out.scrollHeight;
}

function clearOutput(note) {
  ui.output.replaceChildren(...(note ? [el("span", { className: "placeholder" }, note)] : []));
}

function showSummary(outcome, facts, explanation) {
  const parts = facts.filter(Boolean).join(" · ");
  ui.summary.replaceChildren(badge(outcome), el("span", { className: "facts" }, parts), el("p", {}, explanation));
  ui.summary.hidden = false;
}

// Running code.

let current = null; // the run in progress (see runCode)

function setRunning(running) {
  ui.run.disabled = running;
  ui.connect.disabled = running; // a new session would cut the run's stream
  ui.stop.disabled = !running;
  ui.elapsed.textContent = "";
  if (running) ui.runStatus.textContent = "Running…";
}

function onRunNotification(run, message) {
  const params = message.params || {};
  if (message.method === "notifications/message" && typeof params.data?.text === "string") {
    const stream = params.data.stream === "stderr" ? "stderr" : "stdout";
    run.logged[stream] += params.data.text;
    appendOutput(stream, params.data.text);
  } else if (message.method === "notifications/progress" && !mcp.logging) {
    appendOutput("stdout", params.message || ""); // progress does not say which stream; fixed up at the end
  }
}

// The outcome, from the server when it says, else from the older fields.
function outcomeOf(r) {
  if (r.outcome) return r.outcome;
  if (r.busy) return "busy";
  if (r.timedOut) return "timeout";
  return r.success ? "ok" : "error";
}

// Makes the output whole once the result is in. Log messages travel apart from the result (see openListener), so
// the last ones may not have arrived: what is missing of each stream is appended. When the live output cannot be
// matched to the result (it came as progress, which does not tell the streams apart, or some was lost), the
// output is shown again from the result: stdout, then stderr.
function completeOutput(run, r) {
  if (typeof r.stdout !== "string") { // no result from the server (a stopped run): keep what came live
    if (!ui.output.firstChild) clearOutput("The program printed nothing.");
    return;
  }
  const streams = ["stdout", "stderr"];
  const matches = streams.every((s) => (r[s] || "").startsWith(run.logged[s]));
  const live = run.logged.stdout || run.logged.stderr;
  if (!(live && matches)) clearOutput();
  for (const s of streams) appendOutput(s, (r[s] || "").slice(live && matches ? run.logged[s].length : 0));
  if (!ui.output.firstChild) clearOutput("The program printed nothing.");
}

// Why the server did not run the code at all (busy, or no runner for the language), if it did not.
function refusal(r, outcome) {
  if (outcome === "busy") {
    return `The server is busy with other runs. Try again ${r.retryAfterSeconds ? `in ${r.retryAfterSeconds} s` : "shortly"}.`;
  }
  const output = r.output || "";
  if (output.startsWith("no runner for language")) return `This server cannot run that language (${output}).`;
  return null;
}

function showResult(run, result) {
  const r = result.structuredContent || {};
  const outcome = outcomeOf(r);
  const refused = refusal(r, outcome);
  if (refused) {
    showError(refused);
    ui.runStatus.textContent = "The run did not start.";
    return;
  }
  completeOutput(run, r);
  const [label, , explain] = OUTCOMES[outcome] || [outcome, "", () => ""];
  const facts = [
    r.exitCode != null && r.exitCode >= 0 && `exit ${r.exitCode}`,
    formatMs(r.durationMs ?? performance.now() - run.started),
    r.truncated && "output truncated",
    r.session && `session call ${r.session.calls}`,
  ];
  const lost = r.session?.stateLost ? ` The live sandbox’s earlier state was lost: ${r.session.notice}.` : "";
  showSummary(outcome, facts, explain(r) + lost);
  ui.runStatus.textContent = `Run finished: ${label}.`;
  if (Array.isArray(r.files)) renderFiles(r.files, r.filesTruncated);
}

// Without a key every request would fail, and failures count towards the server's lockout: ask for one first.
function haveKey() {
  if (ui.key.value) return true;
  showError("Enter the API key (the server’s MCP_API_TOKEN) first.");
  ui.key.focus();
  return false;
}

async function runCode() {
  if (current || !haveKey() || !ui.conversation.reportValidity()) return;
  const run = {
    controller: new AbortController(), id: null, started: performance.now(), stopping: false,
    logged: { stdout: "", stderr: "" }, // live output received as log messages, by stream
  };
  current = run;
  setRunning(true);
  ui.error.hidden = true;
  ui.summary.hidden = true;
  clearOutput();
  const tick = setInterval(() => (ui.elapsed.textContent = formatMs(performance.now() - run.started)), 100);
  const args = {
    conversationId: ui.conversation.value, language: ui.language.value, code: ui.editor.value,
    metadata: { source: "playground" },
    ...(ui.session.checked && { session: true }),
  };
  const token = `playground-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  try {
    const result = await request("tools/call", { name: "sandbox.run_code", arguments: args, _meta: { progressToken: token } }, {
      signal: run.controller.signal, onId: (id) => (run.id = id), onNotification: (m) => onRunNotification(run, m),
    });
    showResult(run, result);
  } catch (error) {
    // A stopped run whose response never came (the server may drop it, or we gave up waiting) was cancelled.
    if (run.stopping && (error.name === "AbortError" || error instanceof LostConnection)) {
      showResult(run, { structuredContent: { outcome: "cancelled" } });
    } else {
      ui.runStatus.textContent = "Run failed.";
      showFailure(error);
    }
  } finally {
    clearInterval(tick);
    clearTimeout(run.timer);
    current = null;
    setRunning(false);
    loadHistory();
    loadLive();
  }
}

// Asks the server to cancel the run; if its answer does not come within 3 s, stops waiting for it.
async function stopRun() {
  const run = current;
  if (!run || run.stopping) return;
  run.stopping = true;
  ui.stop.disabled = true;
  ui.runStatus.textContent = "Stopping…";
  if (run.id === null) {
    run.controller.abort(); // still opening the session: the call was never sent
    return;
  }
  run.timer = setTimeout(() => run.controller.abort(), 3000);
  await notify("notifications/cancelled", { requestId: run.id, reason: "stopped by user" }).catch(() => run.controller.abort());
}

// Files of the conversation, as the last run listed them.

function renderFiles(files, truncated) {
  ui.files.replaceChildren(...files.map((f) => {
    const item = el("li", {},
      el("a", { href: f.url, download: f.name.split("/").pop() }, f.name),
      el("span", { className: "size" }, formatBytes(f.size)));
    item.dataset.size = f.size; // read back when an upload adds a file to the list
    return item;
  }));
  ui.previews.replaceChildren(...files.filter((f) => IMAGE.test(f.name) || CSV.test(f.name) || TEXT.test(f.name))
    .map((f) => el("figure", {}, preview(f), el("figcaption", {}, f.name))));
  ui.filesNote.textContent = files.length
    ? `${files.length} file${files.length === 1 ? "" : "s"} in /data${truncated ? " (more not listed)" : ""}.`
    : "No files in /data yet.";
}

function preview(file) {
  if (!IMAGE.test(file.name)) return textPreview(file);
  const img = el("img", { src: file.url, alt: `Preview of ${file.name}` });
  img.addEventListener("load", () => img.classList.toggle("small", img.naturalWidth < 96 && img.naturalHeight < 96));
  return img;
}

// A text file in a <pre>, a CSV (or TSV) file as a table of its first rows; filled in once fetched. Only
// textContent and DOM nodes, never HTML from the file.
function textPreview(file) {
  const box = el("div", { className: "table-wrap" }, el("span", { className: "hint" }, "Loading preview…"));
  fetch(file.url, { headers: { Range: `bytes=0-${PREVIEW_BYTES - 1}` } })
    .then((response) => (response.ok ? response.text() : Promise.reject(new Error(response.statusText))))
    .then((text) => {
      const cut = file.size > PREVIEW_BYTES;
      if (CSV.test(file.name)) box.replaceChildren(csvTable(text, file.name.toLowerCase().endsWith(".tsv") ? "\t" : ",", cut));
      else box.replaceChildren(el("pre", { className: "text-preview" }, text + (cut ? "\n…" : "")));
    })
    .catch(() => box.replaceChildren(el("span", { className: "hint" }, "No preview.")));
  return box;
}

// Splits CSV text into rows of fields (quoted fields may hold separators, quotes and newlines), at most `limit`
// rows; a last line cut short by the preview's byte limit is dropped.
function parseCsv(text, separator, limit, cut) {
  const rows = [];
  let row = [], field = "", quoted = false, i = 0;
  for (; i < text.length && rows.length < limit; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') (field += '"'), i++;
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === separator) row.push(field), (field = "");
    else if (c === "\n") row.push(field.replace(/\r$/, "")), rows.push(row), (row = []), (field = "");
    else field += c;
  }
  if (rows.length < limit && !cut && (field || row.length)) row.push(field), rows.push(row);
  return rows;
}

function csvTable(text, separator, cut) {
  const rows = parseCsv(text, separator, PREVIEW_ROWS + 1, cut);
  const [head = [], ...body] = rows;
  const table = el("table", { className: "csv-preview" },
    el("thead", {}, el("tr", {}, ...head.map((name) => el("th", { scope: "col" }, name)))),
    el("tbody", {}, ...body.slice(0, PREVIEW_ROWS).map((row) => el("tr", {}, ...row.map((v) => el("td", {}, v))))));
  const more = body.length > PREVIEW_ROWS || cut;
  return more ? el("div", {}, table, el("p", { className: "hint" }, `First ${Math.min(body.length, PREVIEW_ROWS)} rows.`)) : table;
}

// Uploads the chosen file into the conversation's /data with sandbox_upload_file (base64), then lists it.
async function uploadFile() {
  const file = ui.uploadFile.files[0];
  if (!file || !haveKey() || !ui.conversation.reportValidity()) return;
  if (file.size > UPLOAD_BYTES * 0.7) {
    ui.uploadStatus.textContent = `${file.name} is ${formatBytes(file.size)}; the playground uploads files up to ${formatBytes(UPLOAD_BYTES * 0.7)}.`;
    return;
  }
  ui.uploadStatus.textContent = `Uploading ${file.name}…`;
  try {
    const bytes = new Uint8Array(await file.arrayBuffer());
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    const conversation = ui.conversation.value;
    const result = await request("tools/call", {
      name: "sandbox_upload_file", arguments: { conversationId: conversation, path: file.name, contentBase64: btoa(binary) },
    });
    if (result.isError) throw new Error(result.content?.[0]?.text || "the upload was refused");
    const up = result.structuredContent;
    ui.uploadStatus.textContent = `Uploaded ${up.path} (${formatBytes(up.size)}) to /data.`;
    const listed = [...ui.files.querySelectorAll("li")].map((li) => ({
      name: li.querySelector("a").textContent, url: li.querySelector("a").href, size: Number(li.dataset.size),
    })).filter((f) => f.name !== up.path);
    if (conversation === ui.conversation.value) {
      renderFiles([...listed, { name: up.path, url: up.url, size: up.size }].sort((a, b) => a.name.localeCompare(b.name)));
    }
  } catch (error) {
    ui.uploadStatus.textContent = `The upload failed. ${describe(error)}`;
  } finally {
    ui.uploadFile.value = "";
  }
}

// History: the conversation's runs, newest first; a run can be reopened into the editor.

let reopened = null; // id of the run shown from history

async function loadHistory() {
  const conversation = ui.conversation.value;
  if (!ui.conversation.checkValidity() || !(await mcp.ready?.then(() => true, () => false))) return;
  try {
    const { runs } = await rest(`/v1/runs?conversationId=${encodeURIComponent(conversation)}&limit=50`);
    if (conversation !== ui.conversation.value) return; // the conversation changed meanwhile
    ui.history.replaceChildren(...runs.map(historyItem));
    ui.historyNote.textContent = runs.length ? "Select a run to reopen its code." : "No runs in this conversation yet.";
  } catch (error) {
    ui.history.replaceChildren();
    ui.historyNote.textContent = error instanceof HttpError && error.status === 404
      ? "This server keeps no run history."
      : `The run history could not be loaded. ${describe(error)}`;
  }
}

function historyItem(run) {
  const when = run.queuedAt ? new Date(run.queuedAt).toLocaleTimeString() : "";
  const button = el("button", { type: "button" },
    badge(run.state === "finished" ? run.outcome : run.state),
    el("span", {}, run.language),
    el("span", { className: "facts" }, [when, run.durationMs != null && formatMs(run.durationMs)].filter(Boolean).join(" · ")));
  button.setAttribute("aria-label", `Reopen the ${run.language} run of ${when}: ${OUTCOMES[run.outcome]?.[0] || run.state}`);
  if (run.id === reopened) button.setAttribute("aria-current", "true");
  button.addEventListener("click", () => reopen(run.id));
  return el("li", {}, button);
}

async function reopen(id) {
  try {
    const run = await rest(`/v1/runs/${encodeURIComponent(id)}`);
    reopened = run.id;
    if (![...ui.language.options].some((o) => o.value === run.language)) {
      ui.language.append(el("option", { value: run.language }, run.language));
    }
    ui.language.value = run.language;
    store("language", run.language);
    if (typeof run.code === "string") {
      setCode(run.code);
      saveDraft();
    }
    const outcome = run.state === "finished" ? run.outcome : run.state;
    const facts = [run.exitCode != null && `exit ${run.exitCode}`, run.durationMs != null && formatMs(run.durationMs)];
    const codeNote = typeof run.code === "string" ? "Its code is in the editor." : "This server does not keep code, so the editor is unchanged.";
    showSummary(outcome, facts, `Run of ${new Date(run.queuedAt).toLocaleString()}. ${codeNote}`);
    clearOutput("The output of past runs is not kept; run the code again to see it.");
    ui.error.hidden = true;
    loadHistory();
    ui.editor.focus();
  } catch (error) {
    showFailure(error);
  }
}

// The live sandbox of the conversation (session runs): its processes, from GET /v1/conversations/{id}; restart
// and close through the sandbox_session tool.

async function loadLive() {
  const conversation = ui.conversation.value;
  if (!ui.conversation.checkValidity() || !(await mcp.ready?.then(() => true, () => false))) return;
  let live = null;
  try {
    ({ live } = await rest(`/v1/conversations/${encodeURIComponent(conversation)}`));
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 404)) {
      ui.liveNote.textContent = `The live sandbox could not be read. ${describe(error)}`;
      return;
    }
  }
  if (conversation === ui.conversation.value) renderLive(live);
}

function renderLive(live) {
  ui.liveRestart.disabled = ui.liveClose.disabled = !live;
  if (!live) {
    ui.liveNote.textContent = "No live sandbox: tick “Session” and run to start one.";
    ui.liveProcesses.replaceChildren();
    return;
  }
  const interpreters = live.interpreters.map((i) => i.language).join(", ") || "none yet";
  ui.liveNote.textContent = `${live.calls} call${live.calls === 1 ? "" : "s"} · interpreters: ${interpreters} · `
    + `${formatBytes(live.usage.memoryBytes)} of ${formatBytes(live.usage.memoryLimitBytes)} · ends after `
    + `${Math.round(live.idleSecondsLeft / 60)} min idle`;
  // An interpreter's command line is sandlot's driver program: its language says more. Long ones are cut, whole
  // in the tooltip.
  const interpreter = (pid) => live.interpreters.find((i) => i.pid === pid);
  const shown = (p) => (interpreter(p.pid) ? `${interpreter(p.pid).language} interpreter`
    : p.command.length > 100 ? `${p.command.slice(0, 99)}…` : p.command);
  ui.liveProcesses.replaceChildren(...live.processes.map((p) => el("li", {},
    el("span", { className: "pid" }, String(p.pid)),
    el("span", { className: "command", title: p.command }, shown(p)),
    el("span", { className: "size" }, formatBytes(p.memoryBytes)))));
}

async function manageLive(action) {
  if (!haveKey() || !ui.conversation.reportValidity()) return;
  ui.liveRestart.disabled = ui.liveClose.disabled = true;
  try {
    const result = await request("tools/call", {
      name: "sandbox_session", arguments: { conversationId: ui.conversation.value, action },
    });
    const live = result.structuredContent;
    renderLive(live.live ? live : null);
    if (action === "restart" && live.live) ui.liveNote.textContent = `Interpreters restarted. ${ui.liveNote.textContent}`;
  } catch (error) {
    showFailure(error);
    loadLive();
  }
}

// Wiring.

function start() {
  const remembered = localStorage.getItem(KEY);
  ui.remember.checked = remembered !== null;
  ui.key.value = remembered ?? sessionStorage.getItem(KEY) ?? "";
  fillLanguages(DEFAULT_LANGUAGES);
  changeLanguage();
  setConversation(stored("conversation") || freshConversation());

  ui.keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    saveKey();
    closeSession(); // connect afresh even with the same key: the user asked to
    connectAndLoad();
  });
  ui.remember.addEventListener("change", saveKey);
  ui.language.addEventListener("change", changeLanguage);
  ui.conversation.addEventListener("change", () => ui.conversation.reportValidity() && setConversation(ui.conversation.value));
  ui.newConversation.addEventListener("click", () => {
    setConversation(freshConversation());
    clearOutput();
    ui.summary.hidden = true;
  });
  ui.editor.addEventListener("keydown", onEditorKey);
  ui.editor.addEventListener("input", () => (syncGutter(), saveDraft()));
  ui.editor.addEventListener("scroll", syncGutter);
  ui.run.addEventListener("click", runCode);
  ui.uploadFile.addEventListener("change", uploadFile);
  ui.stop.addEventListener("click", stopRun);
  ui.session.checked = stored("session") === "true";
  ui.session.addEventListener("change", () => store("session", String(ui.session.checked)));
  ui.liveRestart.addEventListener("click", () => manageLive("restart"));
  ui.liveClose.addEventListener("click", () => manageLive("close"));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      runCode();
    }
  });
  window.addEventListener("pagehide", closeSession);
  if (ui.key.value) connectAndLoad();
}

start();
