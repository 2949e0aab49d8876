// sandlot's JavaScript and TypeScript driver: runs cells in one global context (crates/core/src/sessions/driver.rs
// has the wire).
//
// Started as `node --expose-internals -e <this>`. Node cannot dup a descriptor: the requests are read from
// /proc/self/fd/0 opened anew (close-on-exec, as every descriptor node opens), then fd 0 is closed and /dev/null
// opened in its place (node's child_process sets its children's stdio itself). Without /proc the requests stay on
// fd 0.
//
// Each cell runs with vm.runInThisContext as `cell-N.js`, so top-level declarations persist as successive <script>
// tags do (a `let`/`const` declared again is a SyntaxError, as there). The completion value, when not undefined, is
// shown with util.inspect; a thenable is awaited first. A cell with top-level `await` is rewritten by node's own REPL
// rewriting (internal/repl/await): its `var`, `let`, `const`, function and class declarations stay global; without
// it (a node that lacks it), the cell runs in an async function where only plain assignments persist.
// The server strips most TypeScript cells itself and sends them as JavaScript (engine.rs, `session_code`); those it
// sends as TypeScript (module syntax, top-level await, or a syntax error) are stripped here with esbuild.
// TypeScript cells are stripped of types with esbuild (from SANDLOT_ESBUILD) as scripts; a cell with import or
// export is converted to CommonJS, where `import * as x` persists as `x` but default and named imports are renamed.
// SIGINT: during synchronous code, breakOnSigint ends the cell; while a cell's promise is awaited, the driver stops
// waiting (the promise's work goes on). Both give 130, interrupted; between cells SIGINT is ignored. A SIGINT that
// lands in the last moments of a cell's synchronous part can be lost (breakOnSigint's watchdog thread takes it after
// the script returned, and node drops it; an outer watchdog as node's REPL has did not help here): a caller that
// interrupts should send SIGINT again while it waits.
// process.exit() in a cell throws instead and the cell ends with its code. Errors thrown later by a cell's
// callbacks are printed to stderr; the driver goes on.
(() => {
  'use strict';
  const fs = require('fs');
  const vm = require('vm');
  const util = require('util');
  const path = require('path');
  const Module = require('module');

  let requestFd = 0;
  try {
    requestFd = fs.openSync('/proc/self/fd/0', 'r');
    fs.closeSync(0);
    const nullFd = fs.openSync('/dev/null', 'r');
    if (nullFd !== 0) fs.closeSync(nullFd);
  } catch (_) {
    // Keep reading fd 0.
  }

  let rewriteAwait = null;
  try {
    rewriteAwait = require('internal/repl/await').processTopLevelAwait;
  } catch (_) {
    // Not exposed: the simple async wrapper below.
  }

  globalThis.require = Module.createRequire(path.join(process.cwd(), '[sandlot-cell]'));
  if (globalThis.module === undefined) globalThis.module = { exports: {} };
  if (globalThis.exports === undefined) globalThis.exports = globalThis.module.exports;

  // process.stdout and process.stderr write straight to their descriptors, one system call per write: a SIGINT
  // that ends a cell (V8's TerminateExecution) inside node's stream code would leave the stream stuck for good.
  const writeAll = (fd, bytes) => {
    for (let offset = 0; offset < bytes.length;) {
      try {
        offset += fs.writeSync(fd, bytes, offset);
      } catch (error) {
        if (error.code !== 'EAGAIN') throw error;
      }
    }
  };
  const directWrite = (fd) => function write(chunk, encoding, callback) {
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    try {
      writeAll(fd, typeof chunk === 'string' ? Buffer.from(chunk, encoding || 'utf8') : Buffer.from(chunk));
    } catch (error) {
      if (typeof callback === 'function') process.nextTick(callback, error);
      return false;
    }
    if (typeof callback === 'function') process.nextTick(callback);
    return true;
  };
  process.stdout.write = directWrite(1);
  process.stderr.write = directWrite(2);
  const stdoutWrite = directWrite(1);
  const stderrWrite = directWrite(2);

  class ExitRequest extends Error {
    constructor(code) {
      super('process.exit(' + code + ')');
      this.exitCode = code;
    }
  }
  const realExit = process.exit;
  process.exit = (code) => {
    throw new ExitRequest(code === undefined ? (process.exitCode ?? 0) : Number(code) | 0);
  };

  let esbuild = null;
  // esbuild's errors (a type-stripping failure) are shown by their message alone, which names the cell's line.
  class StripError extends Error {}
  const stripTypes = (code, sourcefile) => {
    if (!process.env.SANDLOT_ESBUILD) throw new Error('TypeScript needs esbuild: SANDLOT_ESBUILD is not set');
    if (esbuild === null) esbuild = require(process.env.SANDLOT_ESBUILD);
    const module = /^\s*(import\s*[\w*{'"]|export\s)/m.test(code);
    const options = { loader: 'ts', sourcefile, sourcemap: false, ...(module ? { format: 'cjs' } : {}) };
    try {
      return esbuild.transformSync(code, options).code;
    } catch (error) {
      if (Array.isArray(error?.errors)) throw new StripError(error.message);
      throw error;
    }
  };

  const printError = (error) => {
    let text;
    if (error instanceof Error && typeof error.stack === 'string') {
      // The driver's frames (evalmachine, this -e script, node internals below the cell) are not the user's.
      const lines = error.stack.split('\n');
      const cut = lines.findIndex((line, i) => i > 0 && /\bnode:vm\b|\[eval\]|evalmachine/.test(line));
      text = (cut > 0 ? lines.slice(0, cut) : lines).join('\n');
    } else {
      text = 'Uncaught ' + util.inspect(error);
    }
    stderrWrite(text + '\n');
  };

  const isThenable = (value) => value !== null && (typeof value === 'object' || typeof value === 'function') &&
    typeof value.then === 'function';

  // A SIGINT while a cell runs, and the wait it ends. The handler may run after the cell's synchronous part
  // returned and before its promise is awaited: the flag keeps it for the wait.
  let cellRunning = false;
  let sigintPending = false;
  let interruptWait = null;
  process.on('SIGINT', () => {
    if (!cellRunning) return;
    sigintPending = true;
    if (interruptWait) interruptWait();
  });
  process.on('uncaughtException', (error) => printError(error));
  process.on('unhandledRejection', (error) => printError(error));

  class Interrupted extends Error {}

  // Awaits `promise`, or rejects with Interrupted at SIGINT.
  const awaitInterruptible = (promise) => new Promise((resolve, reject) => {
    interruptWait = () => reject(new Interrupted('interrupted while awaiting the cell\'s promise'));
    if (sigintPending) interruptWait();
    Promise.resolve(promise).then(resolve, reject);
  }).finally(() => {
    interruptWait = null;
  });

  let number = 0;
  const runCell = async (language, code) => {
    number += 1;
    const filename = 'cell-' + number + '.js';
    let interrupted = false;
    let exitCode = 0;
    cellRunning = true;
    sigintPending = false;
    try {
      let source = language === 'typescript' ? stripTypes(code, 'cell-' + number + '.ts') : code;
      let unwrap = false;
      if (/\bawait\b/.test(source)) {
        try {
          new vm.Script(source, { filename });
        } catch (error) {
          if (!(error instanceof SyntaxError)) throw error;
          const rewritten = rewriteAwait ? rewriteAwait(source) : null;
          if (rewritten !== null) {
            source = rewritten;
            unwrap = true;
          } else if (!rewriteAwait) {
            source = '(async () => {\n' + source + '\n})()';
          }
        }
      }
      let value = vm.runInThisContext(source, { filename, breakOnSigint: true, displayErrors: false });
      if (unwrap) value = (await awaitInterruptible(value))?.value;
      if (isThenable(value)) value = await awaitInterruptible(value);
      if (value !== undefined) stdoutWrite(util.inspect(value) + '\n');
    } catch (error) {
      if (error instanceof ExitRequest) {
        exitCode = error.exitCode;
      } else if (error instanceof StripError) {
        stderrWrite(error.message + '\n');
        exitCode = 1;
      } else if (error instanceof Interrupted || error?.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
        stderrWrite('Interrupted: ' + error.message + '\n');
        interrupted = true;
        exitCode = 130;
      } else {
        printError(error);
        exitCode = 1;
      }
    } finally {
      cellRunning = false;
    }
    return { exit_code: exitCode, interrupted };
  };

  // After what the cell wrote (every write is synchronous, above); stderr's marker first.
  const writeEnd = (nonce, end) => {
    stderrWrite('\0SANDLOT-END:' + nonce + '\n');
    stdoutWrite('\0SANDLOT-END:' + nonce + ':' + JSON.stringify(end) + '\n');
  };

  let buffered = Buffer.alloc(0);
  let busy = false;
  const pump = async () => {
    if (busy) return;
    busy = true;
    try {
      for (;;) {
        const newline = buffered.indexOf(10);
        if (newline < 0) break;
        const [nonce, length, language] = buffered.subarray(0, newline).toString('latin1').split(' ');
        const total = newline + 1 + Number(length);
        if (buffered.length < total) break;
        const code = buffered.subarray(newline + 1, total).toString('utf8');
        buffered = buffered.subarray(total);
        const end = await runCell(language, code);
        writeEnd(nonce, end);
      }
    } finally {
      busy = false;
    }
  };

  const requests = fs.createReadStream(null, { fd: requestFd, autoClose: false });
  requests.on('data', (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    pump();
  });
  requests.on('end', () => realExit.call(process, 0));
  requests.on('error', () => realExit.call(process, 0));
})();
