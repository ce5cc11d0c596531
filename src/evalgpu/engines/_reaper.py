"""Processes an engine started die with the process that started them (Linux).

vLLM stops its engine processes when the `LLM` is closed or its process exits, but a killed
process (kill -9, the OOM killer) runs nothing: vLLM's engine core, started by spawn on its CPU
build, then waits forever for requests, and its worker keeps its memory and a core, slowing
the resumed run beside them (docs/VLLM.md has the measurement). So the vLLM
engine lists the processes its `LLM` started (`descendants`) and starts `watch` over them: a
small process of its own that SIGKILLs them once their starter is gone. Each process is named
by its pid and its start time, so that a pid the system reused is spared.

The watchdog starts before the `LLM` does: vLLM's start-up takes a minute on a CPU, and a kill
in that minute left its engine core behind too. Until the engine names the processes its `LLM`
started (`Watchdog.settle`), the watchdog collects, every 0.2 s, its starter's descendants that
it was not told were there before; killed then, the starter takes those with it.

    python .../evalgpu/engines/_reaper.py PARENT [PID ...]   # what `watch` starts; PIDs: not ours
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["Watchdog", "descendants", "watch"]


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _start(fields: list[str]) -> str:
    """A process's start time (clock ticks after boot), from its `_stat` fields."""
    return fields[19]


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every living descendant of `pid`, as (pid, start time); none where /proc is missing."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), _start(fields)))
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for process in children.get(todo.pop(), []):
            found.append(process)
            todo.append(process[0])
    return found


class Watchdog:
    """The watchdog process of one engine (`watch`)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def settle(self, processes: list[tuple[int, str]]) -> None:
        """The processes to kill are these (pid, start time): collecting stops."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(" ".join(f"{pid}:{start}" for pid, start in processes) + "\n")
            self.process.stdin.flush()
        except OSError:  # the watchdog is gone (killed with its session): nothing to guard
            pass

    def kill(self) -> None:
        """Stop the watchdog (its processes were stopped otherwise)."""
        self.process.kill()
        self.process.wait()


def watch(before: set[int]) -> Watchdog | None:
    """Start the watchdog over the processes this one starts from now on (not those in
    `before`, its descendants so far); None where there is no /proc. Name them with
    `Watchdog.settle` once they are started; `Watchdog.kill` once they are stopped otherwise."""
    if not sys.platform.startswith("linux"):
        return None
    return Watchdog(
        subprocess.Popen(
            # The file itself, not `-m`: importing the package would take a second or more on
            # a loaded machine, and the watchdog must be collecting while vLLM starts.
            [
                sys.executable,
                os.path.abspath(__file__),
                str(os.getpid()),
                *map(str, sorted(before)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # not in the run's process group: a Ctrl-C leaves it be
        )
    )


def _main(argv: list[str]) -> None:
    """Collect `argv[0]`'s new descendants until told which to watch (a line of PID:START on
    stdin), wait for `argv[0]` to die, then SIGKILL those left."""
    parent, before = int(argv[0]), {int(a) for a in argv[1:]} | {os.getpid()}
    targets: dict[int, str] = {}
    settled = False
    while os.getppid() == parent:
        if settled:
            time.sleep(1)
            continue
        if select.select([sys.stdin], [], [], 0.2)[0]:
            line = sys.stdin.readline()
            if line:  # the engine's list: exactly these
                targets = {int(p): t for p, t in (item.split(":") for item in line.split())}
            settled = True  # end of input: the starter is gone, or closed it; keep what we have
            continue
        for pid, start in descendants(parent):
            if pid not in before:
                targets.setdefault(pid, start)
    for pid, start in targets.items():
        try:
            if _start(_stat(pid)) == start:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            pass


if __name__ == "__main__":
    _main(sys.argv[1:])
