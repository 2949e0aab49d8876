// The official TypeScript MCP SDK (@modelcontextprotocol/sdk 1.x) against `sandlot serve`, over Streamable HTTP and
// the legacy HTTP+SSE transport: initialize, list the tools, run Python that writes a file, download the file by its
// signed URL, compare bytes. Needs root (sandboxes) and a built binary ($SANDLOT_BIN or target/debug/sandlot).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";

const token = "ts-token-" + Math.random().toString(16).slice(2);
let server;
let base;

before(async () => {
  assert.equal(process.getuid(), 0, "the end-to-end tests start sandboxes and need root");
  server = await startSandlot({ token, rootPrefix: "sandlot-ts-" });
  ({ base } = server);
});

after(() => stopSandlot(server));

const code = [
  "data = bytes(range(256)) * 3",
  "open('/data/blob.bin', 'wb').write(data)",
  "print('wrote', len(data))",
].join("\n");

async function exercise(transport) {
  const client = new Client({ name: "sandlot-ts-e2e", version: "1.0.0" });
  await client.connect(transport);
  assert.equal(client.getServerVersion().name, "sandlot");
  const tools = await client.listTools();
  assert.deepEqual(tools.tools.map((t) => t.name).sort(), ["sandbox_browser", "sandbox_list_runners", "sandbox_run_code", "sandbox_session", "sandbox_upload_file"]);
  const result = await client.callTool({ name: "sandbox_run_code", arguments: { conversationId: "ts-e2e", language: "python", code } });
  assert.equal(result.isError, false);
  const data = result.structuredContent;
  assert.equal(result.content[0].text, `outcome: ok, exit code 0, ${data.durationMs} ms\n${data.output}`);
  assert.equal(data.success, true);
  assert.equal(data.stdout, "wrote 768\n");
  const file = data.files.find((f) => f.name === "blob.bin");
  assert.equal(file.size, 768);
  const response = await fetch(file.url);
  assert.equal(response.status, 200);
  const bytes = new Uint8Array(await response.arrayBuffer());
  assert.deepEqual([...bytes], [...Array(768).keys()].map((i) => i % 256));
  const js = await client.callTool({ name: "sandbox_run_code", arguments: { conversationId: "ts-e2e", language: "typescript", code: "const n: number = 6 * 7; console.log(n)" } });
  assert.equal(js.structuredContent.stdout, "42\n");
  await client.close();
}

test("Streamable HTTP", async () => {
  await exercise(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
});

test("legacy HTTP+SSE", async () => {
  const headers = { Authorization: `Bearer ${token}` };
  await exercise(
    new SSEClientTransport(new URL(`${base}/sse`), {
      requestInit: { headers },
      eventSourceInit: { fetch: (url, init) => fetch(url, { ...init, headers: { ...init?.headers, ...headers } }) },
    }),
  );
});
