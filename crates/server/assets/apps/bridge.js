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
