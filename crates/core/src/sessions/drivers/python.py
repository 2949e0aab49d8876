# sandlot's Python driver: runs cells in one persistent namespace (crates/core/src/sessions/driver.rs has the wire).
#
# Started as `python3 -u -c <this>`. Requests come from a private descriptor (fd 0 moved aside, close-on-exec;
# /dev/null put on fd 0). Each cell is compiled as `<cell N>` (its source in linecache, so tracebacks show the user's
# lines) and run in a namespace like __main__'s; a last bare expression is shown through sys.displayhook as the REPL
# does; top-level `await` works as in notebooks. SIGINT while a cell runs raises KeyboardInterrupt (exit 130);
# between cells it is ignored. After a cell: open matplotlib figures shown (pyplot.show(), which the environment's
# hook saves), streams flushed, the end markers.
# Every name of the driver's own lives in _sandlot_driver's frame, none in the cell's namespace.


def _sandlot_driver():
    import ast
    import builtins
    import inspect
    import json
    import linecache
    import os
    import signal
    import sys
    import traceback
    import types

    requests = os.fdopen(os.dup(0), "rb")  # os.dup makes a non-inheritable (close-on-exec) descriptor
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # inheritable: the cells' children get /dev/null as stdin
    os.close(null)
    sys.argv = [""]

    # The cells' namespace is a real __main__ module, so pickle and multiprocessing find what cells define.
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    namespace = main.__dict__

    state = {"running": False, "interrupted": False}

    # A handler rather than SIG_IGN between cells: an ignored signal stays ignored in the cells' children.
    def on_sigint(signum, frame):
        if state["running"]:
            state["interrupted"] = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    def write_all(fd, data):
        while data:
            data = data[os.write(fd, data) :]

    def flush():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass

    def print_exception(error):
        # The driver's frames (the outermost ones, and the compiler's for a SyntaxError) are dropped: the
        # traceback starts in the cell, and a SyntaxError shows only where it is, as python shows a script's.
        tb = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
            tb = tb.tb_next
        try:
            traceback.print_exception(type(error), error, tb)
        except Exception:
            print("error while printing the exception", file=sys.stderr)

    # Top-level `await`, as in notebooks: a cell that awaits compiles to a coroutine, run to its end on one event
    # loop kept for the session (made at the first such cell; between cells it does not run).
    TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    loop = []

    def run_code(code):
        if not code.co_flags & inspect.CO_COROUTINE:
            return eval(code, namespace)
        if not loop:
            import asyncio

            loop.append(asyncio.new_event_loop())
        return loop[0].run_until_complete(eval(code, namespace))

    def run(number, source):
        filename = "<cell %d>" % number
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            state["interrupted"] = False
            state["running"] = True
            try:
                tree = ast.parse(source, filename, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                run_code(compile(tree, filename, "exec", flags=TOP_LEVEL_AWAIT, dont_inherit=True))
                if last is not None:
                    value = run_code(compile(last, filename, "eval", flags=TOP_LEVEL_AWAIT, dont_inherit=True))
                    sys.displayhook(value)
            finally:
                state["running"] = False
            code = 0
        except SystemExit as error:
            if error.code is None:
                code = 0
            elif isinstance(error.code, int):
                # What a process would exit with, when the code does not fit the wire's i32.
                code = error.code if -(2**31) <= error.code < 2**31 else error.code & 0xFF
            else:
                print(error.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt as error:
            print_exception(error)
            code = 130
        except BaseException as error:
            print_exception(error)
            code = 1
        if not state["interrupted"]:
            show_figures()
        return code

    def show_figures():
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            if pyplot.get_fignums():
                pyplot.show()
        except Exception as error:
            print_exception(error)

    number = 0
    while True:
        header = requests.readline()
        if not header:
            return
        nonce, length, _language = header.decode("ascii").split()
        source = requests.read(int(length)).decode("utf-8", "replace")
        number += 1
        code = run(number, source)
        flush()
        end = json.dumps({"exit_code": code, "interrupted": state["interrupted"]})
        write_all(2, b"\0SANDLOT-END:" + nonce.encode() + b"\n")
        write_all(1, b"\0SANDLOT-END:" + nonce.encode() + b":" + end.encode() + b"\n")


_sandlot_driver()
