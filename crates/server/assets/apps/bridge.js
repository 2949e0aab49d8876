  // The views' shared part, put in each view's closure by app_views.rs: DOM helpers, JSON-RPC 2.0 with the host
  // over postMessage, and the host's theme and style variables.
  const $ = (id) => document.getElementById(id);
  const el = (tag, props = {}, ...children) => {
    const node = Object.assign(document.createElement(tag), props);
    for (const child of children) node.append(child);
    return node;
  };

  // ---- the Apps protocol: JSON-RPC 2.0 with the host (window.parent) over postMessage ----
  let nextId = 1;
  const pending = new Map();
  const send = (message) => window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");
  const request = (method, params) => new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    send({ id, method, params });
  });
  const notify = (method, params) => send({ method, params });

  function applyContext(context) {
    if (!context) return;
    if (context.theme) document.documentElement.classList.toggle("dark", context.theme === "dark");
    const variables = context.styles && context.styles.variables;
    if (variables) {
      for (const [name, value] of Object.entries(variables)) {
        if (name.startsWith("--") && typeof value === "string") document.documentElement.style.setProperty(name, value);
      }
    }
  }

  const PROTOCOL_VERSION = "2026-01-26";
  let host = {}; // the host's capabilities, once it has initialized the view

  // Answers the host: responses to the view's requests, its own requests (teardown and ping), and its notifications,
  // handed to `on` (input, result, cancelled, and teardown if the view has something to stop); then initializes as
  // `appName`, says so, and tells the host the view's size as it changes. `note` is the view's own.
  function connect(appName, on) {
    window.addEventListener("message", (event) => {
      if (event.source !== window.parent) return;
      const message = event.data;
      if (!message || message.jsonrpc !== "2.0") return;
      if (message.method === undefined && message.id !== undefined) {
        const waiter = pending.get(message.id);
        if (!waiter) return;
        pending.delete(message.id);
        if (message.error) waiter.reject(new Error(message.error.message || "error " + message.error.code));
        else waiter.resolve(message.result);
        return;
      }
      if (message.id !== undefined) { // a request of the host's
        if (message.method === "ui/resource-teardown" || message.method === "ping") {
          if (message.method === "ui/resource-teardown" && on.teardown) on.teardown();
          send({ id: message.id, result: {} });
        }
        else send({ id: message.id, error: { code: -32601, message: "method not found: " + message.method } });
        return;
      }
      const params = message.params || {};
      switch (message.method) {
        case "ui/notifications/tool-input": on.input(params.arguments || {}); break;
        case "ui/notifications/tool-result": on.result(params); break;
        case "ui/notifications/tool-cancelled": on.cancelled(params.reason); break;
        case "ui/notifications/host-context-changed": applyContext(params); break;
        default: break;
      }
    });
    request("ui/initialize", {
      protocolVersion: PROTOCOL_VERSION,
      appInfo: { name: appName, version: "1" },
      appCapabilities: { availableDisplayModes: ["inline"] },
    }).then((result) => {
      host = (result && result.hostCapabilities) || {};
      applyContext(result && result.hostContext);
      notify("ui/notifications/initialized", {});
      new ResizeObserver(() => notify("ui/notifications/size-changed", {
        width: Math.ceil(document.documentElement.scrollWidth), height: Math.ceil(document.documentElement.scrollHeight),
      })).observe(document.body);
    }).catch((error) => note("The host did not initialize the view: " + error.message));
  }
