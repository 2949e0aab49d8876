// Authentication that cannot be turned against its users, against the real `sandlot serve`: a real mcp-remote (the
// stdio bridge the README recommends, driven by the official TypeScript SDK's stdio client) started five times
// within a minute, with the token passed by its --header option. At every start mcp-remote sends requests without a
// header (OAuth discovery such as /mcp/.well-known/openid-configuration); those used to count as failed logins, and
// three of them locked every client of the address out, the right token included. Then: many header-less and
// unknown-path requests do not lock out a valid token; wrong tokens past the limit get 429 while the right token still
// gets through. Needs root (sandboxes) and a built binary ($SANDLOT_BIN or target/*/debug/sandlot).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";

const token = "remote-token-" + Math.random().toString(16).slice(2);
// The limit the server runs with: low, so that a lock-out, if unauthenticated requests counted, would come quickly.
const failuresPerMinute = 3;
const mcpRemote = resolve(import.meta.dirname, "node_modules/mcp-remote/dist/proxy.js");
let server;
let base;
let configDir;

before(async () => {
  assert.equal(process.getuid(), 0, "the end-to-end tests start sandboxes and need root");
  server = await startSandlot({
    token,
    rootPrefix: "sandlot-remote-",
    env: { SANDLOT_AUTH_FAILURES_PER_MINUTE: String(failuresPerMinute) },
  });
  ({ base } = server);
  // mcp-remote keeps its state (OAuth client registrations, tokens) here instead of ~/.mcp-auth.
  configDir = mkdtempSync(join(tmpdir(), "sandlot-mcp-remote-"));
});

after(async () => {
  await stopSandlot(server);
  if (configDir) rmSync(configDir, { recursive: true, force: true });
});

const tools = ["sandbox_browser", "sandbox_list_runners", "sandbox_run_code", "sandbox_session", "sandbox_upload_file"];

/** A stateless tools/list over plain HTTP with `authorization` (or none): the response's status. */
async function toolsList(authorization) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (authorization) headers.authorization = authorization;
  const response = await fetch(`${base}/mcp`, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  await response.arrayBuffer();
  return response;
}

test("a real mcp-remote started five times within a minute lists and calls tools every time", async () => {
  const started = Date.now();
  for (let start = 1; start <= 5; start++) {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [mcpRemote, `${base}/mcp`, "--header", `Authorization: Bearer ${token}`],
      env: { ...process.env, MCP_REMOTE_CONFIG_DIR: configDir },
      stderr: "pipe",
    });
    let log = "";
    transport.stderr?.on("data", (chunk) => (log += chunk));
    const client = new Client({ name: "sandlot-mcp-remote-e2e", version: "1.0.0" });
    try {
      await client.connect(transport);
      const listed = await client.listTools();
      assert.deepEqual(listed.tools.map((t) => t.name).sort(), tools, `start ${start}`);
      const result = await client.callTool({
        name: "sandbox_run_code",
        arguments: { conversationId: "remote", language: "bash", code: `echo start ${start}` },
      });
      assert.equal(result.isError, false, `start ${start}: ${JSON.stringify(result)}`);
      assert.equal(result.structuredContent.stdout, `start ${start}\n`);
    } catch (error) {
      throw new Error(`mcp-remote start ${start} failed: ${error}\nmcp-remote's log:\n${log}`);
    } finally {
      await client.close();
    }
  }
  const seconds = (Date.now() - started) / 1000;
  assert.ok(seconds < 60, `five starts took ${seconds} s: not within a minute`);
  // And a client with the right token, straight to the server, still works.
  const client = new Client({ name: "sandlot-after-mcp-remote", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), tools);
  await client.close();
});

test("many header-less and unknown-path requests do not lock out a valid token", async () => {
  for (let i = 0; i < 30; i++) {
    assert.equal((await toolsList(null)).status, 401);
    const get = await fetch(`${base}/mcp`, { headers: { accept: "text/event-stream" } });
    await get.arrayBuffer();
    assert.equal(get.status, 401);
    for (const path of ["/mcp/.well-known/openid-configuration", "/.well-known/oauth-protected-resource/mcp", "/favicon.ico", "/nope"]) {
      const probe = await fetch(`${base}${path}`);
      await probe.arrayBuffer();
      assert.equal(probe.status, 404, path);
    }
  }
  assert.equal((await toolsList(`Bearer ${token}`)).status, 200);
});

test("wrong tokens past the limit get 429 while the right token still gets through", async () => {
  const statuses = [];
  for (let i = 0; i < failuresPerMinute + 10; i++) statuses.push((await toolsList("Bearer wrong")).status);
  // The allowance refills one failure every 20 s: on a slow machine one more 401 may slip in.
  const unauthorized = statuses.filter((s) => s === 401).length;
  assert.ok(unauthorized >= failuresPerMinute && unauthorized <= failuresPerMinute + 1, statuses.join(" "));
  assert.deepEqual(new Set(statuses), new Set([401, 429]), statuses.join(" "));
  const refused = await toolsList("Bearer wrong");
  assert.equal(refused.status, 429);
  assert.ok(Number(refused.headers.get("retry-after")) >= 1, refused.headers.get("retry-after"));
  assert.equal((await toolsList(`Bearer ${token}`)).status, 200);
  assert.equal((await toolsList("Bearer wrong")).status, 429);
});
