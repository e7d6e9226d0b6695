"""The child of the "fresh subprocess" peer in bench/bench_run_code.py: the smallest honest way to
run a script in its own process and send its tool calls back to the parent.

    python -I bench/peers/subproc_child.py      (the parent writes to its stdin, reads its stdout)

Protocol, JSON lines on fds 0 and 1:

    parent -> child: {"script": "..."}                      once, first
    child -> parent: {"t": "call", "id": n, "name": ..., "args": {...}, "p": bool}
    parent -> child: {"t": "result", "id": n, "output": ...}   (or "error")
    child -> parent: {"t": "done", "result": <run()'s return>} | {"t": "error", "message": ...}

The script defines `run()` and sees two globals: `tools` (`tools.NAME(**args)` returns the tool's
output, raising on an error) and `parallel_map(items, fn)` (ordered results, at most 8 threads at
once; the calls made inside carry "p": true so the parent answers them concurrently). No sandbox:
this is a process boundary and nothing more. Only the stdlib, so `-I` start-up stays minimal.
"""

import json
import os
import threading

MAX_WORKERS = 8


class Channel:
    def __init__(self) -> None:
        self.rfile = os.fdopen(0, "rb", buffering=1 << 16)
        self.wlock = threading.Lock()
        self.next_id = 0
        self.parallel = False
        self.waiting: dict = {}  # id -> [event, reply], while a parallel_map runs
        self.outstanding = threading.Semaphore(0)  # one release per parallel call sent
        self.stop_reader = False

    def send(self, msg: dict) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self.wlock:
            os.write(1, data)

    def read(self) -> dict:
        line = self.rfile.readline()
        if not line:
            raise SystemExit(1)
        return json.loads(line)

    def call(self, name: str, args: dict) -> object:
        with self.wlock:
            self.next_id += 1
            rid = self.next_id
        if not self.parallel:  # sequential: read our own reply, no thread hop
            self.send({"t": "call", "id": rid, "name": name, "args": args, "p": False})
            reply = self.read()
        else:  # the reader thread hands the reply over
            slot = [threading.Event(), None]
            self.waiting[rid] = slot
            self.send({"t": "call", "id": rid, "name": name, "args": args, "p": True})
            self.outstanding.release()
            slot[0].wait()
            reply = slot[1]
        if reply.get("error") is not None:
            raise RuntimeError(f"{name}: {reply['error']}")
        return reply.get("output")

    def _reader(self) -> None:
        while True:
            self.outstanding.acquire()  # read only when a reply is owed
            if self.stop_reader:
                return
            reply = self.read()
            slot = self.waiting.pop(reply["id"])
            slot[1] = reply
            slot[0].set()

    def parallel_map(self, items, fn):
        """[fn(item) for item in items] on at most MAX_WORKERS threads, in order."""
        items = list(items)
        results = [None] * len(items)
        nxt = [0]
        lock = threading.Lock()
        errors: list = []

        def worker() -> None:
            while True:
                with lock:
                    if errors or nxt[0] >= len(items):
                        return
                    i = nxt[0]
                    nxt[0] += 1
                try:
                    results[i] = fn(items[i])
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
                    return

        self.parallel, self.stop_reader = True, False
        reader = threading.Thread(target=self._reader, daemon=True)
        reader.start()
        threads = [threading.Thread(target=worker) for _ in range(min(MAX_WORKERS, len(items)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # every call made has had its reply (its worker waited for it): stop the reader
        self.stop_reader = True
        self.outstanding.release()
        reader.join()
        self.parallel = False
        if errors:
            raise errors[0]
        return results


class Tools:
    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def __getattr__(self, name: str):
        return lambda **args: self._channel.call(name, args)


def main() -> None:
    channel = Channel()
    start = channel.read()
    namespace = {"__name__": "__script__", "tools": Tools(channel), "parallel_map": channel.parallel_map}
    try:
        exec(compile(start["script"], "script.py", "exec"), namespace)  # noqa: S102 - running it is the point
        result = namespace["run"]()
        final = {"t": "done", "result": result}
    except BaseException as exc:  # noqa: BLE001
        final = {"t": "error", "message": f"{type(exc).__name__}: {exc}"}
    channel.send(final)
    os._exit(0)


if __name__ == "__main__":
    main()
