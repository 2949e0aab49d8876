// MCP Apps in a real browser: the run view (ui://sandlot/run) that sandbox_run_code links, and the conversation view
// (ui://sandlot/conversation) that sandbox_session links, each rendered by a minimal
// host page (apps-host.html, served by this test with a /mcp proxy that holds the token, as a host's backend would)
// in <iframe sandbox="allow-scripts">, speaking the Apps postMessage protocol: ui/initialize, tool-input,
// tool-result, and the view's resources/read proxied by the host to a real `sandlot serve` (started here on a free
// port). Debian's Chromium through playwright-core, never a downloaded browser. Needs root (sandboxes) and Chromium.
//
// The screenshots are kept in artifacts/: apps-run.png (and apps-run-dark.png, the host's dark theme) and
// apps-conversation.png.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";
import { slowCode } from "./slow-code.mjs";

const here = import.meta.dirname;
const artifacts = join(here, "artifacts");
const token = "browser-apps-" + Math.random().toString(16).slice(2);
let sandlot;
let hostServer;
let hostBase;
let browser;
let page;
const foreignRequests = []; // anything requested from another origin than the host page's (nothing may be)
const errors = [];

// A 60x40 PNG, and a CSV with markup in a cell (which the view must show as text).
const SLOW_CODE = slowCode({ width: 60, height: 40, csv: "x,y\n1,2\n3,<b>4</b>\n" });

/** The host's backend: its page, and /mcp forwarded to sandlot with the token. */
function startHost(base) {
  const page = readFileSync(join(here, "apps-host.html"));
  const server = createServer(async (request, response) => {
    if (request.method === "GET" && request.url === "/") {
      response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(page);
      return;
    }
    if (request.method === "POST" && request.url === "/mcp") {
      const chunks = [];
      for await (const chunk of request) chunks.push(chunk);
      const forwarded = await fetch(`${base}/mcp`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json",
                   accept: "application/json, text/event-stream" },
        body: Buffer.concat(chunks),
      });
      response.writeHead(forwarded.status, { "content-type": forwarded.headers.get("content-type") || "text/plain" });
      response.end(Buffer.from(await forwarded.arrayBuffer()));
      return;
    }
    response.writeHead(404).end();
  });
  return new Promise((done) => server.listen(0, "127.0.0.1", () => done(server)));
}

before(async () => {
  assert.equal(process.getuid(), 0, "the browser test starts sandboxes and needs root");
  mkdirSync(artifacts, { recursive: true });
  sandlot = await startSandlot({ token, rootPrefix: "sandlot-browser-apps-" });
  hostServer = await startHost(sandlot.base);
  hostBase = `http://127.0.0.1:${hostServer.address().port}`;
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium" });
  page = await browser.newPage({ viewport: { width: 820, height: 760 } });
  page.setDefaultTimeout(20_000);
  page.on("request", (request) => {
    if (!request.url().startsWith(`${hostBase}/`) && !request.url().startsWith("data:") && request.url() !== "about:srcdoc") {
      foreignRequests.push(request.url());
    }
  });
  page.on("pageerror", (error) => errors.push(error.message));
  page.on("console", (message) => { if (message.type() === "error") errors.push(message.text()); });
  await page.goto(`${hostBase}/`);
});

after(async () => {
  await browser?.close();
  hostServer?.close();
  await stopSandlot(sandlot);
});

test("the run view shows a call's live output, then its result, image and CSV preview, through its host only", async () => {
  const args = { conversationId: "apps", language: "python", code: SLOW_CODE };
  const calling = page.evaluate((args) => window.runInView("sandbox_run_code", args), args);
  const view = page.frameLocator("iframe#view");

  // Live: the first line shows in the view while the host's tools/call has not returned (the run prints for
  // another 4.5 s after it; the view polls every 0.7 s, so this fails only if the view shows nothing live).
  await view.locator("#output").filter({ hasText: "line 1" }).waitFor({ timeout: 30_000 });
  assert.equal(await page.evaluate(() => window.host.callDone), false, "line 1 showed before the result came");
  assert.equal(await view.locator("#status").innerText(), "running");

  await calling;
  await view.locator("#status.ok").waitFor();
  assert.equal(await view.locator("#output .stdout").innerText(), "line 1\nline 2\nline 3\nline 4\n");
  assert.equal(await view.locator("#output .stderr").innerText(), "a note on stderr\n");
  assert.match(await view.locator("#facts").innerText(), /^python · exit 0 · \d+ ms · run [0-9a-f]{32}$/);

  // The image came inside the result (a data: URL), and shows.
  const image = view.locator("#images img");
  assert.equal(await image.count(), 1);
  // The view runs in an opaque origin: the host page cannot reach into its document.
  assert.equal(await page.evaluate(() => document.querySelector("iframe#view").contentDocument), null);
  await view.locator("#images img").evaluate((img) => img.decode());
  assert.equal(await image.evaluate((img) => img.naturalWidth), 60);
  assert.match(await image.getAttribute("src"), /^data:image\/png;base64,iVBORw0KGgo/);

  // The files, the CSV the run made previewed as a table read through the host's resources/read.
  const names = await view.locator("#files .name").allInnerTexts();
  assert.deepEqual(names, ["out.csv", "out.png"]);
  await view.locator("#files table").waitFor();
  assert.deepEqual(await view.locator("#files th").allInnerTexts(), ["x", "y"]);
  // A cell's markup stays text.
  assert.deepEqual(await view.locator("#files td").allInnerTexts(), ["1", "2", "3", "<b>4</b>"]);
  assert.equal(await view.locator("#files b").count(), 0);

  // What the view asked its host for: the conversation's runs and the run's live output while it ran, then the
  // CSV; nothing else, and the page (view included) fetched nothing from anywhere but the host.
  const asked = await page.evaluate(() => window.host.viewRequests.map((r) => `${r.method} ${r.params.uri}`));
  const kinds = new Set(asked.map((a) => a.replace(/runs\/[0-9a-f]{32}\//, "runs/{id}/")));
  assert.deepEqual([...kinds].sort(), [
    "resources/read sandlot://conversations/apps/files/out.csv",
    "resources/read sandlot://conversations/apps/runs",
    "resources/read sandlot://runs/{id}/live",
  ]);
  assert.deepEqual(foreignRequests, []);
  assert.equal(await page.evaluate(() => window.host.csp),
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src 'self'; " +
    "img-src 'self' data:; font-src 'self'; media-src 'self' data:; frame-src 'none'; object-src 'none'; base-uri 'self'");
  assert.ok((await page.evaluate(() => window.host.sizes.length)) > 0, "the view told its size");
  assert.deepEqual(errors, []);

  await page.screenshot({ path: join(artifacts, "apps-run.png"), fullPage: true });

  // The host's theme reaches the view (host-context-changed).
  await page.evaluate(() => window.setTheme("dark"));
  await view.locator("html.dark").waitFor({ state: "attached" });
  await page.screenshot({ path: join(artifacts, "apps-run-dark.png"), fullPage: true });
});

test("the run view follows its own call's run, not another client's queued after it in the conversation", async () => {
  // The view's first look at the conversation's runs is held until another client's run of the same conversation
  // is queued behind the call's: the newest unfinished run is then that one, and only the call's code tells them apart.
  await page.evaluate(() => { window.host.holdRuns = new Promise((release) => { window.host.releaseRuns = release; }); });
  const conversation = "apps-two";
  const calling = page.evaluate((args) => window.runInView("sandbox_run_code", args),
    { conversationId: conversation, language: "python", code: SLOW_CODE });
  await until(async () => (await runsOf(conversation)).some((run) => run.state === "running"));
  const other = callTool("sandbox_run_code", { conversationId: conversation, language: "bash", code: "echo other" });
  await until(async () => (await runsOf(conversation)).length === 2);
  await page.evaluate(() => window.host.releaseRuns());

  const view = page.frameLocator("iframe#view");
  await view.locator("#output").filter({ hasText: "line 1" }).waitFor({ timeout: 30_000 });
  assert.equal(await page.evaluate(() => window.host.callDone), false, "line 1 showed before the result came");
  await calling;
  await view.locator("#status.ok").waitFor();
  assert.equal((await other).structuredContent.stdout, "other\n");
  await page.evaluate(() => { window.host.holdRuns = null; });
  assert.deepEqual(errors, []);
});

/** The conversation's runs, newest first, from the REST API. */
async function runsOf(conversation) {
  const response = await fetch(`${sandlot.base}/v1/runs?conversationId=${conversation}`,
    { headers: { authorization: `Bearer ${token}` } });
  return (await response.json()).runs;
}

/** Waits until `condition` holds, for at most 30 s. */
async function until(condition) {
  const deadline = Date.now() + 30_000;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, "timed out");
    await new Promise((done) => setTimeout(done, 50));
  }
}

/** A tools/call straight to sandlot (as the model's side of the host would make it): the result. */
async function callTool(name, args) {
  const response = await fetch(`${sandlot.base}/mcp`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json",
               accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
  });
  const text = await response.text();
  const data = text.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim());
  return JSON.parse(data.length ? data[data.length - 1] : text).result;
}

test("the conversation view shows the live sandbox and the conversation's runs, each output read on demand", async () => {
  // A session run leaves the conversation a live sandbox with a Python interpreter.
  const session = await callTool("sandbox_run_code",
    { conversationId: "apps", language: "python", code: "x = 41\nprint('kept', x + 1)", session: true });
  assert.equal(session.structuredContent.stdout, "kept 42\n", JSON.stringify(session));

  await page.evaluate((args) => window.runInView("sandbox_session", args), { conversationId: "apps", action: "status" });
  const view = page.frameLocator("iframe#view");
  await view.locator("#status.live").waitFor();
  assert.equal(await view.locator("#title").innerText(), "conversation apps");
  assert.match(await view.locator("#usage").innerText(), /interpreters: python \(pid \d+\)/);
  assert.ok((await view.locator("#processes tbody tr").count()) >= 1, "the interpreter's process is listed");

  // The runs, newest first: the session run, then the first test's run; opening one reads its output.
  const rows = view.locator("#runs tr.run");
  await rows.first().waitFor();
  assert.equal(await rows.count(), 2);
  assert.deepEqual(await view.locator("#runs tr.run .badge").allInnerTexts(), ["ok", "ok"]);
  await rows.nth(1).locator("button").click();
  await view.locator("#runs pre.output").waitFor();
  assert.equal(await view.locator("#runs pre.output .stdout").innerText(), "line 1\nline 2\nline 3\nline 4\n");
  assert.equal(await view.locator("#runs pre.output .stderr").innerText(), "a note on stderr\n");

  const asked = await page.evaluate(() => window.host.viewRequests.map((r) => `${r.method} ${r.params.uri}`));
  assert.deepEqual(asked.map((a) => a.replace(/runs\/[0-9a-f]{32}\//, "runs/{id}/")), [
    "resources/read sandlot://conversations/apps/runs",
    "resources/read sandlot://runs/{id}/output",
  ]);
  assert.deepEqual(foreignRequests, []);
  assert.deepEqual(errors, []);
  await page.screenshot({ path: join(artifacts, "apps-conversation.png"), fullPage: true });

  // The host tears the view down; it answers.
  const answer = await page.evaluate(() => window.teardown());
  assert.deepEqual([answer.result, answer.error], [{}, undefined]);
});
