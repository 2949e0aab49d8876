// The playground page (GET /) in a real browser: playwright-core drives Debian's Chromium ($CHROMIUM_BIN, default
// /usr/bin/chromium; never a browser downloaded from npm) against a `sandlot serve` this test starts itself
// ($SANDLOT_BIN, default target/debug/sandlot) on a free port with a temporary SANDBOX_ROOT. Needs root
// (sandboxes) and Chromium (`apt-get install chromium`).
//
//   cd tests/e2e/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci && node --test
//
// Screenshots are kept in artifacts/ (playground.png, and playground-375-dark.png for the narrow dark layout).
// The wrong-key test (one failed authentication) runs near the end: sandlot locks an address out after 3 a minute.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";
import { slowCode } from "./slow-code.mjs";

const here = import.meta.dirname;
const artifacts = join(here, "artifacts");
const token = "browser-token-" + Math.random().toString(16).slice(2);
let server;
let base;
let sandlot;
let browser;
let page;
const foreignRequests = []; // anything the page fetched from another origin (it must fetch nothing)
const pageErrors = [];

const SLOW_CODE = slowCode({ width: 6, height: 4, csv: "x,y\n1,2\n" });

const LONG_CODE = `import time
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
`;

const text = (selector) => page.locator(selector).innerText();

before(async () => {
  assert.equal(process.getuid(), 0, "the browser test starts sandboxes and needs root");
  mkdirSync(artifacts, { recursive: true });
  sandlot = await startSandlot({
    token,
    rootPrefix: "sandlot-browser-",
    env: { SANDLOT_STORE_CODE: "true" },
  });
  ({ process: server, base } = sandlot);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium" });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(20_000);
  page.on("request", (request) => {
    if (/^https?:/.test(request.url()) && !request.url().startsWith(`${base}/`)) foreignRequests.push(request.url());
  });
  page.on("pageerror", (error) => pageErrors.push(error.message));
  await page.goto(`${base}/`);
});

after(async () => {
  await browser?.close();
  await stopSandlot(sandlot);
});

test("a run streams its output live, then lists its files with working links and previews its image", async () => {
  await page.fill("#api-key", token);
  await page.click("#connect");
  await page.waitForSelector("#connection.ok");
  // The options now come from the server's runners, labelled with their versions.
  await page.waitForFunction(() => /python \d/.test(document.querySelector("#language option[value=python]")?.textContent));
  await page.selectOption("#language", "python");
  await page.fill("#editor", SLOW_CODE);
  await page.click("#run");

  await page.waitForFunction(() => document.querySelector("#output").textContent.includes("line 1"));
  assert.ok(await page.isEnabled("#stop"), "the run is still going when its first line shows");
  assert.ok(!(await text("#output")).includes("line 4"), "the first line shows before the last is printed");
  assert.ok(await page.isHidden("#summary"));

  await page.waitForSelector("#summary:not([hidden])", { timeout: 30_000 });
  assert.equal(await text("#summary .badge"), "Succeeded");
  assert.match(await text("#summary .facts"), /^exit 0 · \d/);
  assert.equal(await text("#output .stdout"), "line 1\nline 2\nline 3\nline 4\n");
  assert.equal(await text("#output .stderr"), "a note on stderr\n");

  const links = await page.$$eval("#files a", (as) => Object.fromEntries(as.map((a) => [a.textContent, a.href])));
  assert.deepEqual(Object.keys(links).sort(), ["out.csv", "out.png"]);
  const csv = await fetch(links["out.csv"]); // signed URLs need no key
  assert.equal(csv.status, 200);
  assert.equal(await csv.text(), "x,y\n1,2\n");
  const png = await fetch(links["out.png"]);
  assert.equal(png.status, 200);
  const bytes = Buffer.from(await png.arrayBuffer());
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.equal(bytes.readUInt32BE(16), 6, "the PNG's width");

  const preview = page.locator("#previews img");
  assert.equal(await preview.count(), 1, "only the image is previewed");
  await page.waitForFunction(() => document.querySelector("#previews img").naturalWidth > 0);
  assert.equal(await preview.evaluate((img) => img.naturalWidth), 6);

  await page.screenshot({ path: join(artifacts, "playground.png"), fullPage: true });
});

test("the conversation's runs are listed and a run reopens into the editor", async () => {
  await page.waitForSelector("#history button");
  await page.fill("#editor", "print('something else')");
  await page.click("#history li:first-child button");
  await page.waitForFunction((code) => document.querySelector("#editor").value === code, SLOW_CODE);
  assert.equal(await text("#summary .badge"), "Succeeded");
  assert.equal(await page.inputValue("#language"), "python");
});

test("an uploaded CSV is previewed as a table and read by a run", async () => {
  const rows = ["region,amount", "north,3", 'south,"4"', "<b>east</b>,5"];
  await page.setInputFiles("#upload-file", { name: "sales.csv", mimeType: "text/csv", buffer: Buffer.from(rows.join("\n") + "\n") });
  await page.waitForFunction(() => document.querySelector("#upload-status").textContent.startsWith("Uploaded sales.csv"));
  const table = page.locator('#previews figure:has(figcaption:text-is("sales.csv")) table.csv-preview');
  await table.waitFor();
  assert.deepEqual(await table.locator("th").allInnerTexts(), ["region", "amount"]);
  assert.deepEqual(await table.locator("tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent))),
    [["north", "3"], ["south", "4"], ["<b>east</b>", "5"]]);
  assert.equal(await page.locator("#previews b").count(), 0, "the file's text is never parsed as HTML");
  await page.fill("#editor", [
    "import csv",
    "rows = list(csv.DictReader(open('sales.csv')))",
    "print('total', sum(int(r['amount']) for r in rows))",
    "open('report.txt', 'w').write('rows: %d\\n' % len(rows))",
  ].join("\n"));
  await page.click("#run");
  await page.waitForSelector("#summary:not([hidden])", { timeout: 30_000 });
  assert.equal(await text("#summary .badge"), "Succeeded");
  assert.equal(await text("#output .stdout"), "total 12\n");
  // The run's listing has the upload and the new text file; the text file is previewed in a <pre>.
  await page.waitForFunction(() => document.querySelector("#previews pre.text-preview")?.textContent === "rows: 3\n");
  assert.equal(await table.count(), 1);
  assert.deepEqual(await page.locator("#previews figcaption").allInnerTexts(), ["out.csv", "out.png", "report.txt", "sales.csv"]);
  await page.screenshot({ path: join(artifacts, "playground-upload.png"), fullPage: true });
});

test("Tab indents in the editor; Escape, then Tab, moves the focus on", async () => {
  await page.fill("#editor", "");
  await page.focus("#editor");
  await page.keyboard.type("if True:");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Tab");
  await page.keyboard.type("pass");
  assert.equal(await page.inputValue("#editor"), "if True:\n    pass");
  await page.keyboard.press("Escape");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "run");
});

test("Stop cancels a long run quickly", async () => {
  await page.fill("#editor", LONG_CODE);
  await page.focus("#editor");
  await page.keyboard.press("Control+Enter");
  await page.waitForFunction(() => document.querySelector("#output").textContent.includes("tick 2"));
  const stopped = Date.now();
  await page.click("#stop");
  await page.waitForSelector("#summary:not([hidden])", { timeout: 30_000 });
  const took = Date.now() - stopped;
  assert.equal(await text("#summary .badge"), "Cancelled");
  // Quickly: milliseconds on an idle machine; the bound allows a loaded one, far below the run's 60 s.
  assert.ok(took < 10_000, `cancelled after ${took} ms`);
  assert.ok(await page.isEnabled("#run"));
});

test("the page fits 375 px and follows a dark system theme", async () => {
  await page.setViewportSize({ width: 375, height: 800 });
  await page.emulateMedia({ colorScheme: "dark" });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `the page is ${width} px wide`);
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(background, "rgb(13, 17, 23)");
  await page.screenshot({ path: join(artifacts, "playground-375-dark.png"), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.emulateMedia({ colorScheme: "light" });
});

test("a wrong key is reported in words", async () => {
  await page.fill("#api-key", "not-the-key");
  await page.click("#connect");
  await page.waitForFunction(() => document.querySelector("#error").textContent.includes("API key was not accepted"));
  assert.ok(await page.isVisible("#error"));
  assert.equal(await text("#connection"), "Key not accepted");
  assert.equal(await page.getAttribute("#api-key", "aria-invalid"), "true");
});

test("a server that went away is reported as a lost connection", async () => {
  server.kill("SIGTERM");
  await new Promise((done) => server.once("exit", done));
  await page.fill("#api-key", token);
  await page.click("#run");
  await page.waitForFunction(() => document.querySelector("#error").textContent.includes("Lost connection to the server"));
  assert.ok(await page.isVisible("#error"));
});

test("the page fetched nothing from elsewhere and raised no errors", () => {
  assert.deepEqual(foreignRequests, []);
  assert.deepEqual(pageErrors, []);
});
