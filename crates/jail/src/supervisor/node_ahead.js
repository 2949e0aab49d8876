// sandlot: the preload of a Node started ahead of its conversation's next run (see `ahead.rs`). Node loads it
// through `NODE_OPTIONS=--require` before the main module, in a sandbox built and confined as the run's. It waits on
// fd 0 for its run: a 10-digit length, then that many bytes of JSON (`file`, `code`, `env`: name and value pairs, in order); whatever follows is
// the run's own input, left unread. It writes the code to the main module's path, takes the run's environment (the
// one Node started with, but `NODE_OPTIONS` without this preload), removes itself and returns: Node then loads the
// main module exactly as `node <file>` does. End of input before a run: the sandbox was let go unused.
'use strict';
const fs = require('fs');

function readExactly(size) {
  const buffer = Buffer.alloc(size);
  let got = 0;
  while (got < size) {
    let read;
    try {
      read = fs.readSync(0, buffer, got, size - got, null);
    } catch (error) {
      if (error.code !== 'EAGAIN') throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // a non-blocking pipe: wait, not spin
      continue;
    }
    if (read === 0) process.exit(0);
    got += read;
  }
  return buffer;
}

// Node makes its standard output and error streams on their first use, which costs a run's first `console.log`
// milliseconds: made now, while it waits (the same streams, on the same pipes, as that first use would make).
void process.stdout;
void process.stderr;
const run = JSON.parse(readExactly(Number(readExactly(10).toString())).toString());
fs.writeFileSync(run.file, run.code, { mode: 0o644, flag: 'wx' });
for (const name of Object.keys(process.env)) delete process.env[name];
for (const [name, value] of run.env) process.env[name] = value;
fs.unlinkSync(__filename);
delete require.cache[__filename];
