// The playground's live sandbox in a real browser (Debian's Chromium through playwright-core, as playground.test.js;
// never a downloaded browser): with "Session" ticked a run keeps its interpreter's state for the next, the "Live
// sandbox" panel lists the process a run left running, "Restart interpreters" clears the variables and "Close" ends
// the sandbox. Its own `sandlot serve` on a free port. Needs root (sandboxes) and Chromium.
//
// The screenshot is kept in artifacts/playground-session.png.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";

const artifacts = join(import.meta.dirname, "artifacts");
const token = "browser-session-" + Math.random().toString(16).slice(2);
let sandlot;
let browser;
let page;
const pageErrors = [];

const text = (selector) => page.locator(selector).innerText();

before(async () => {
  assert.equal(process.getuid(), 0, "the browser test starts sandboxes and needs root");
  mkdirSync(artifacts, { recursive: true });
  sandlot = await startSandlot({ token, rootPrefix: "sandlot-browser-session-" });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium" });
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.setDefaultTimeout(20_000);
  page.on("pageerror", (error) => pageErrors.push(error.message));
  await page.goto(`${sandlot.base}/`);
});

after(async () => {
  await browser?.close();
  await stopSandlot(sandlot);
});

/** Runs `code` in Python and waits for its summary; the output's text. A refusal the page shows fails the test. */
async function run(code) {
  await page.fill("#editor", code);
  await page.click("#run");
  await page.waitForSelector("#summary:not([hidden]), #error:not([hidden])", { timeout: 30_000 });
  assert.ok(await page.isHidden("#error"), await text("#error").catch(() => ""));
  return text("#output");
}

test("a session run keeps its state; the panel lists its processes, restarts and closes it", async () => {
  await page.fill("#api-key", token);
  await page.click("#connect");
  await page.waitForSelector("#connection.ok");
  await page.selectOption("#language", "python");
  // The note says so once the page has asked the server (it shows the page's own hint until then).
  await page.waitForFunction(() => document.querySelector("#live-note").textContent.includes("No live sandbox"));
  assert.ok(await page.isDisabled("#live-restart"));
  await page.check("#session");

  // Its own session (start_new_session): the interpreters' restart leaves it, as any background process.
  await run(
    "import subprocess\nx = 41\n" +
      "server = subprocess.Popen(['python3', '-m', 'http.server', '8000'], start_new_session=True,\n" +
      "                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n",
  );
  assert.equal(await text("#summary .badge"), "Succeeded");
  await page.waitForFunction(() => document.querySelector("#live-processes").textContent.includes("http.server 8000"));
  assert.match(await text("#live-note"), /^1 call · interpreters: python · /);
  assert.match(await text("#live-processes"), /python interpreter/);
  assert.ok(await page.isEnabled("#live-restart"));

  assert.equal(await run("print(x + 1)"), "42\n");
  assert.match(await text("#summary .facts"), /session call 2$/);
  await page.screenshot({ path: join(artifacts, "playground-session.png"), fullPage: true });

  await page.click("#live-restart");
  await page.waitForFunction(() => document.querySelector("#live-note").textContent.startsWith("Interpreters restarted."));
  assert.equal(await run("print('x' in globals())"), "False\n");
  assert.match(await text("#live-processes"), /http\.server 8000/, "a background process stays through a restart");

  await page.click("#live-close");
  await page.waitForFunction(() => document.querySelector("#live-note").textContent.startsWith("No live sandbox"));
  assert.equal(await page.locator("#live-processes li").count(), 0);
  assert.deepEqual(pageErrors, []);
});
