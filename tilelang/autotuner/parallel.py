"""Compiling many configurations at once: a pool of compile processes, one per CPU core.

Each job is a kernel factory, its arguments and one configuration, serialized with cloudpickle
(a factory defined in a script or a test travels by value). A worker builds the kernel completely,
tracing, passes, nvcc and host compiler, through `tilelang.jit`, whose disk cache stores it; the
parent then calls the same factory with the same arguments and loads the entry instead of
compiling (see tilelang/cache.py). A job answers None when it built, else the reason it did not.

The workers are plain `python -c` subprocesses talking pickle over their stdin and stdout, not
multiprocessing's: those re-import the user's `__main__` in every worker, which reruns a script's
top-level code (and its tuning) unless it is guarded by `if __name__ == "__main__":`. Each worker
runs in its own session, so a job past its time limit is ended together with the nvcc it started,
and a worker that crashes (a segfault in the compiler) costs only the job it was running.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import time

from tilelang import env

# The worker gets the parent's import path before importing anything of tilelang, so a factory
# from a checkout, a test folder or a script's folder unpickles there as it does here.
_BOOTSTRAP = (
    "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
    "from tilelang.autotuner.parallel import serve; serve()"
)


# A worker's first message, once tilelang is imported: job time limits count from it.
_READY = "tilelang-compile-worker-ready"


def default_workers() -> int:
    """All the CPU cores this process may use, or TILELANG_AUTO_TUNING_CPU_COUNTS when set."""
    override = env.autotune_cpu_count()
    if override:
        return override
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def build(payload: bytes) -> str | None:
    """Build one job (in a worker): None when the kernel is built and stored, else why not.

    A job is (factory, its source file, the options of `tilelang.jit`, "lazy" or "eager", args,
    kwargs): a lazy factory is called, an eager one's `compile` is.
    """
    try:
        import cloudpickle

        from tilelang.jit import jit as make_jit

        factory, filename, options, mode, args, kwargs = cloudpickle.loads(payload)
        jit = make_jit(**options)(with_filename(factory, filename))
        kernel = jit.compile(*args, **kwargs) if mode == "eager" else jit(*args, **kwargs)
        kernel._ensure_built()
    except Exception as err:  # noqa: BLE001 - any failure only disqualifies this configuration
        return describe_error(err)
    return None


def with_filename(fn, filename: str | None):
    """`fn` with the source file it was defined in. cloudpickle (3.1 and later) sends a function's
    code with the file name '<dynamic-code>'; tracing a kernel reads its source, so the real name
    goes back on the code object and on the code of the functions defined inside it."""
    import types

    def fix(code):
        consts = tuple(fix(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_filename=filename, co_consts=consts)

    if filename and isinstance(fn, types.FunctionType) and fn.__code__.co_filename != filename:
        fn.__code__ = fix(fn.__code__)
    return fn


def serve() -> None:
    """A worker's loop: read a job from stdin, build it, write the outcome; stop at None or EOF."""
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever else prints to stdout (the factory, a library) goes to stderr instead
    jobs = sys.stdin.buffer
    pickle.dump(_READY, results)
    results.flush()
    while True:
        try:
            payload = pickle.load(jobs)
        except EOFError:
            return
        if payload is None:
            return
        pickle.dump(build(payload), results)
        results.flush()


class _Worker:
    """The parent's handle on one compile process."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        pickle.dump(sys.path, self.proc.stdin)
        self.proc.stdin.flush()  # it imports tilelang now, while the parent prepares the jobs
        self.ready = False
        self.job = None
        self.started = 0.0

    def submit(self, job: int, payload: bytes) -> bool:
        self.job, self.started = job, time.monotonic()  # a worker not yet ready restarts the clock
        try:
            pickle.dump(payload, self.proc.stdin)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def receive(self) -> str | None:
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            return f"the compile process died (exit code {self.proc.wait()}; its output is above)"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and the nvcc it started
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self) -> None:
        try:
            pickle.dump(None, self.proc.stdin)
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self.kill()


def compile_all(payloads: list[bytes], workers: int, timeout: float | None = None, progress=None) -> list[str | None]:
    """Build every job on up to `workers` processes; the outcome of each job, in order.

    Args:
        timeout: seconds one job may take (not counting the worker's start-up); the process
            building it is then ended, and started anew for the jobs left.
        progress: called with no arguments as each job finishes (a progress bar's update).
    """
    outcomes: list = [None] * len(payloads)
    pending = list(range(len(payloads)))[::-1]  # popped from the end: jobs start in order
    pool = [_Worker() for _ in range(max(1, min(workers, len(payloads))))]
    busy: list[_Worker] = []

    def finish(worker: _Worker, outcome: str | None) -> None:
        outcomes[worker.job] = outcome
        worker.job = None
        busy.remove(worker)
        if progress is not None:
            progress()

    def replace(worker: _Worker) -> None:
        worker.kill()
        pool[pool.index(worker)] = _Worker() if pending else worker

    try:
        while pending or busy:
            for worker in pool:
                if worker.job is None and pending:
                    job = pending.pop()
                    busy.append(worker)
                    if not worker.submit(job, payloads[job]):  # it died before reading the job
                        finish(worker, worker.receive())
                        replace(worker)
            if not busy:
                continue
            wait_s = None
            if timeout is not None and any(w.ready for w in busy):
                wait_s = max(0.0, min(w.started for w in busy if w.ready) + timeout - time.monotonic())
            readable = multiprocessing.connection.wait([w.proc.stdout for w in busy], timeout=wait_s)
            now = time.monotonic()
            for worker in list(busy):
                if worker.proc.stdout in readable:
                    outcome = worker.receive()
                    if outcome == _READY:  # started up: the job's clock starts now
                        worker.ready, worker.started = True, now
                        continue
                    died = worker.proc.poll() is not None
                    finish(worker, outcome)
                    if died:
                        replace(worker)
                elif timeout is not None and worker.ready and now - worker.started >= timeout:
                    finish(worker, f"TimeoutError: compiling took longer than the timeout ({timeout} s)")
                    replace(worker)
    finally:
        for worker in pool:
            if worker.job is None:
                worker.close()
            else:  # interrupted (Ctrl-C): do not wait for its nvcc
                worker.kill()
    return outcomes
