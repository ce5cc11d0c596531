"""Processes an engine started die with the process that started them (Linux).

vLLM stops its engine processes when the `LLM` is closed or its process exits, but a killed
process (kill -9, the OOM killer) runs nothing: vLLM's engine core, started by spawn on its CPU
build, then waits forever for requests, and its worker keeps its memory and a core (measured:
both alive 18 minutes after a kill -9, the resumed run beside them at half speed). So the vLLM
engine lists the processes its `LLM` started (`descendants`) and starts `watch` over them: a
small process of its own that SIGKILLs them once their starter is gone. Each process is named
by its pid and its start time, so that a pid the system reused is spared.

    python -m evalgpu.engines._reaper PARENT PID:START ...   # what `watch` starts
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

__all__ = ["descendants", "watch"]


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


def watch(processes: list[tuple[int, str]]) -> subprocess.Popen[bytes] | None:
    """Start the watchdog over `processes` (pid, start time); None where there is nothing to
    watch or no /proc. Kill the returned process once `processes` are stopped otherwise."""
    if not processes or not sys.platform.startswith("linux"):
        return None
    targets = [f"{pid}:{start}" for pid, start in processes]
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(os.getpid()), *targets],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the run's process group: a Ctrl-C leaves it to its work
    )


def _main(argv: list[str]) -> None:
    """Wait for `argv[0]` (this process's parent) to die, then SIGKILL the PID:START left."""
    parent, targets = int(argv[0]), [a.split(":") for a in argv[1:]]
    while os.getppid() == parent:
        time.sleep(1)
    for pid, start in targets:
        try:
            if _start(_stat(pid)) == start:
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, IndexError):
            pass


if __name__ == "__main__":
    _main(sys.argv[1:])
