"""`python -m evalgpu`: parse flags, turn them into an engine and scorers, call `evaluate`.

Commands: `run` (score dataset files into an output folder), `report` (the table and the
static page of an output folder), `models list|pull`. Exit status: 0 when the command
finished (a run with some failed rows included), 1 when nothing could be done (no row
scored, the model did not load), 2 for a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypedDict

from evalgpu._options import SCALE
from evalgpu.calibrate import FIT_SHARE, SEED
from evalgpu.distributed import check_layout
from evalgpu.driver import CHUNK_SECONDS
from evalgpu.engines import AUTO, BACKENDS, COMPUTES, SCRIPTED
from evalgpu.evaluation import Progress
from evalgpu.models import verdicts_for
from evalgpu.scorers.summarization import MAX_QUESTIONS
from evalgpu.settings import SCORERS, RunSettings
from evalgpu.storage import ConfigError

__all__ = ["main"]

PROG = "python -m evalgpu"
ERRORS_SHOWN = 20
"""Row errors echoed on stderr as they happen; the rest are only in results.jsonl."""
PROGRESS = ("auto", "bar", "lines", "off")
"""`--progress`: auto (the default) is a bar on a terminal, else a line every 10 s."""

RUN_EXAMPLES = f"""\
examples:
  {PROG} run examples/summarization.jsonl --scorer summarization --out runs/summ
  {PROG} run rows.jsonl --scorer mypackage.scorers:length_scorer --out runs/length
  {PROG} run examples/context_recall.jsonl --scorer context-recall --out runs/recall
  {PROG} run outputs.csv --scorer summarization --map summary=model_output --out runs/csv
  {PROG} run big.parquet --scorer summarization --scorer context-recall \\
      --model qwen2.5-7b-instruct --backend vllm --out runs/big
  {PROG} run big.parquet --scorer summarization --model qwen2.5-7b-instruct \\
      --ray --ray-address 10.0.0.1:6379 --out runs/big      # docs/SCALE.md

Rows: JSON Lines, JSON (an array), CSV or Parquet, by extension. Fields: id, source,
summary (or output), input (the question, or agent-shaped messages), ground_truth, context
(a list of passages, or one string). Running again with the same --out resumes: only rows
without a successful result are scored."""

REPORT_EXAMPLES = f"""\
examples:
  {PROG} report runs/summ        # the table on stdout, runs/summ/report.html"""

CALIBRATE_EXAMPLES = f"""\
examples:
  {PROG} calibrate benchmarks/data/attribution_dev.jsonl benchmarks/data/frank_dev.jsonl \\
      --out runs/cal
  {PROG} run rows.jsonl --scorer context-recall --calibration runs/cal/calibration.json \\
      --out runs/recall"""

MODELS_EXAMPLES = f"""\
examples:
  {PROG} models list
  {PROG} models pull             # the default model, into the models folder
  {PROG} models pull smollm2-135m-instruct   # the small model (plumbing tests)"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="LLM-as-judge scoring of summaries and retrieval on a local model.",
        epilog=f"run `{PROG} COMMAND --help` for a command's options and examples",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    raw = argparse.RawDescriptionHelpFormatter

    run = commands.add_parser(
        "run",
        help="score dataset files into an output folder",
        epilog=RUN_EXAMPLES,
        formatter_class=raw,
        description="Score dataset files with one or more scorers, streaming, resumable.",
    )
    run.add_argument(
        "data", nargs="+", metavar="DATA", help="dataset files (.jsonl .json .csv .parquet)"
    )
    run.add_argument(
        "--scorer",
        action="append",
        required=True,
        type=_scorer,
        help=f"a scorer to run: {', '.join(SCORERS)}, or module:factory for your own, built "
        "as factory(engine) (repeat for several)",
    )
    run.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="output folder: results.jsonl, summary.json, config.json (resumed when it exists)",
    )
    _max_questions_flag(run)
    run.add_argument(
        "--scale",
        type=float,
        default=SCALE,
        metavar="X",
        help=f"scores lie in [0, X] (default: {SCALE:g})",
    )
    run.add_argument(
        "--verdicts",
        choices=("hard", "soft"),
        default=None,
        help="hard: share of true verdicts (the reference); soft: mean probability of true, "
        "read from the judge's logits (default: the one measured to agree best with people "
        "for the judge, which its preset names: soft for the default judge; else hard)",
    )
    run.add_argument(
        "--calibration",
        metavar="FILE",
        help="a calibration file its verdicts go through (`calibrate` writes one), or none "
        "for the judge's own (default: the one the judge's preset names, if any)",
    )
    run.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        help="read FIELD from COLUMN, e.g. summary=model_output (repeatable)",
    )
    run.add_argument(
        "--chunk-seconds",
        type=float,
        default=CHUNK_SECONDS,
        metavar="S",
        help="how long a chunk of rows (one engine batch, one append to results.jsonl) aims "
        "to take: the run starts with one row, then sizes each chunk from its rate so far, so "
        "records reach --out at least this often and a kill loses at most about this much "
        f"work (default: {CHUNK_SECONDS:g})",
    )
    run.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        metavar="N",
        help="a fixed number of rows per chunk instead (a chunk is cut where the source "
        "changes, at 2N regardless)",
    )
    run.add_argument("--limit", type=int, metavar="N", help="read at most N rows in all")
    _engine_flags(run)
    run.add_argument(
        "--ray",
        action="store_true",
        help='score on a Ray cluster, one engine replica per actor (pip install "evalgpu[ray]")',
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --ray: the cluster to join (default: RAY_ADDRESS, else a local cluster)",
    )
    run.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="with --ray: engine replicas (default: one per GPU of the cluster, 1 without)",
    )
    run.add_argument(
        "--progress",
        choices=PROGRESS,
        default=PROGRESS[0],
        help="a bar on a terminal, else a line every 10 s (default: auto)",
    )

    report = commands.add_parser(
        "report",
        help="print the table of an output folder and write its report.html",
        epilog=REPORT_EXAMPLES,
        formatter_class=raw,
        description="Per-scorer table, lowest-scoring rows with their reasons, and a static "
        "report.html (score histograms, alignment vs coverage).",
    )
    report.add_argument("dir", type=Path, metavar="DIR", help="an output folder of `run`")

    calibrate = commands.add_parser(
        "calibrate",
        help="fit the judge's calibration on labelled rows, and report it on rows held out",
        epilog=CALIBRATE_EXAMPLES,
        formatter_class=raw,
        description="Score labelled rows uncalibrated, fit a threshold and a slope per kind "
        "of check on a share of them, and compare calibrated with uncalibrated on the rest "
        "(evalgpu.calibrate says how). Writes DIR/calibration.json (for run --calibration) "
        "and DIR/report.json; a rerun resumes the scoring.",
    )
    calibrate.add_argument(
        "data",
        nargs="+",
        type=Path,
        metavar="DATA",
        help="labelled JSON Lines files: label_faithful, label_attributed or human_coverage "
        "rows (the formats of benchmarks/data)",
    )
    calibrate.add_argument("--out", required=True, type=Path, metavar="DIR", help="its folder")
    calibrate.add_argument(
        "--name", help="the calibration's name in records and config.json (default: DIR's)"
    )
    calibrate.add_argument(
        "--fit-share",
        type=float,
        default=FIT_SHARE,
        metavar="X",
        help="the share of the row groups (rows judged against one text) fitted on; the rest "
        f"are held out and reported on (default: {FIT_SHARE:g})",
    )
    calibrate.add_argument(
        "--seed",
        type=int,
        default=SEED,
        help=f"--sample's draw, the split's shuffle and the bootstrap's (default: {SEED})",
    )
    calibrate.add_argument("--limit", type=int, metavar="N", help="the first N rows of each file")
    calibrate.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="N rows of each file drawn with --seed (written to DIR/<file>.sample.jsonl, "
        "which is what is scored)",
    )
    _max_questions_flag(calibrate)
    _engine_flags(calibrate)
    calibrate.add_argument("--progress", choices=PROGRESS, default=PROGRESS[0], help="as run's")

    models = commands.add_parser(
        "models",
        help="list the model presets, or pull an embedded model",
        epilog=MODELS_EXAMPLES,
        formatter_class=raw,
    )
    verbs = models.add_subparsers(
        dest="verb", required=True, metavar="list|pull", parser_class=_Parser
    )
    verbs.add_parser("list", help="the presets, and whether their weights are present")
    pull = verbs.add_parser("pull", help="fetch an embedded model into the models folder")
    pull.add_argument(
        "name",
        nargs="?",
        help="qwen2.5-coder-1.5b-instruct (the default) or smollm2-135m-instruct",
    )
    return parser


def _max_questions_flag(parser: argparse.ArgumentParser) -> None:
    """`--max-questions`, which `run` and `calibrate` share."""
    parser.add_argument(
        "--max-questions",
        type=int,
        default=MAX_QUESTIONS,
        metavar="N",
        help=f"summarization: coverage questions per source (default: {MAX_QUESTIONS})",
    )


def _engine_flags(parser: argparse.ArgumentParser) -> None:
    """The judge's flags, which `run` and `calibrate` share."""
    parser.add_argument(
        "--model", help="a model folder or preset name (default: the default model)"
    )
    parser.add_argument(
        "--backend",
        default=AUTO,
        help=f"{', '.join(BACKENDS)}, or module:factory for your own engine; {SCRIPTED} judges "
        f"by rules with no model, to test a pipeline (default: {AUTO})",
    )
    parser.add_argument(
        "--compute",
        choices=COMPUTES,
        help="the transformers engine's compute: auto picks by the CPU's features "
        "(bfloat16 where native, else float32; default: auto)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="the judge's CPU threads, for the transformers engine and vLLM's CPU build "
        "(default: every core this process may use). On a machine whose other processes keep "
        "cores busy, give the cores left free: threads wait for each other at every step (on "
        "2 cores beside one busy process, vLLM's CPU build ran 4 %% slower with 2 threads than "
        "with 1, the transformers engine several times slower; docs/BENCHMARKS.md)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="the transformers engine's requests decoded together (default: 16); fewer "
        "take less memory above the model",
    )


def _scorer(name: str) -> str:
    if name in SCORERS or ":" in name:
        return name
    raise argparse.ArgumentTypeError(
        f"invalid choice: {name!r} (choose from {', '.join(SCORERS)}, or module:factory)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    if args.command == "run":
        return _run(args)
    if args.command == "report":
        return _report(args)
    if args.command == "calibrate":
        return _calibrate(args)
    return _models(args)


def _fail(command: str, message: str, status: int) -> int:
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return status


def _settings(args: argparse.Namespace) -> RunSettings:
    mapping: dict[str, str] = {}
    for item in args.map:
        key, sep, column = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--map takes FIELD=COLUMN, got {item!r}")
        mapping[key.strip()] = column.strip()
    return RunSettings(
        data=tuple(Path(p) for p in args.data),
        scorers=tuple(args.scorer),
        out=args.out,
        scale=args.scale,
        verdicts=args.verdicts,
        mapping=mapping,
        chunk_size=args.chunk_size,
        chunk_seconds=args.chunk_seconds,
        limit=args.limit,
        calibration=getattr(args, "calibration", None),
        **_judge_settings(args),
    )


def _judge_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of the flags `run` and `calibrate` share (`_engine_flags`,
    `_max_questions_flag`)."""
    names = ("model", "backend", "compute", "threads", "batch_size", "max_questions")
    return {name: getattr(args, name) for name in names}


def _run(args: argparse.Namespace) -> int:
    if not args.ray and (args.ray_address is not None or args.replicas is not None):
        return _fail("run", "--ray-address and --replicas need --ray", 2)
    if args.ray and importlib.util.find_spec("ray") is None:
        return _fail("run", '--ray needs Ray: pip install "evalgpu[ray]"', 2)
    try:
        settings = _settings(args)
        check_layout(args.replicas)
    except ValueError as exc:
        return _fail("run", str(exc), 2)
    console = _Console(sys.stderr, args.progress)
    hooks: _Hooks = {
        "on_progress": console.progress,
        "on_error": console.error,
        "on_notice": console.notice,
    }
    try:
        if args.ray:
            from evalgpu.distributed import run_ray

            run: Any = run_ray(settings, address=args.ray_address, replicas=args.replicas, **hooks)
        else:
            try:
                engine = settings.load_engine()
            except Exception as exc:
                return _fail("run", f"cannot load the judge: {type(exc).__name__}: {exc}", 1)
            try:
                scorers = settings.build_scorers(engine)
            except (ValueError, TypeError) as exc:
                return _fail("run", str(exc), 2)
            if settings.verdicts is None:
                mode, why = verdicts_for(engine)
                other = "hard" if mode == "soft" else "soft"
                print(
                    f"evalgpu: {mode} verdicts ({why}; --verdicts {other} for the other)",
                    file=sys.stderr,
                )
            run = settings.evaluate(scorers, **hooks).run()
    except ConfigError as exc:  # raised when the folder opens, before anything is scored
        console.finish()
        return _fail("run", str(exc), 2)
    except KeyboardInterrupt:
        console.finish()
        print(f"{PROG} run: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk, an executor that fails, ...
        console.finish()
        return _fail(
            "run",
            f"{type(exc).__name__}: {exc} (finished chunks are kept in "
            f"{settings.out / 'results.jsonl'}; run again to resume)",
            1,
        )
    finally:
        console.finish()
    return _finished(settings, run.progress, run.file_errors, run.bad_lines)


class _Hooks(TypedDict):
    """What a run tells the console as it goes (`evaluate`'s and `run_ray`'s arguments)."""

    on_progress: Callable[[Progress], None]
    on_error: Callable[[str], None]
    on_notice: Callable[[str], None]


def _finished(settings: RunSettings, p: Progress, file_errors: list[str], bad_lines: int) -> int:
    """The table on stdout and the run's last line on stderr; the exit status."""
    from evalgpu.report import format_report

    summary_path = settings.out / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    print(format_report(summary, len(settings.data) > 1))
    print(f"\nwrote {settings.out / 'results.jsonl'}, {summary_path}")
    line = (
        f"{PROG} run: {_n(p.rows_run, 'row')} in {p.elapsed:.1f} s"
        + (f" ({p.resumed:,} already done)" if p.resumed else "")
        + f": {p.scored:,} scored, {p.failed:,} failed"
        + (f' (see "error" in {settings.out / "results.jsonl"})' if p.failed else "")
    )
    if file_errors:
        line += f"; {len(file_errors)} unreadable file(s)"
    repeated = summary["duplicate_ids"]["count"]
    if repeated:
        line += f"; {_n(repeated, 'row')} repeating an id (scored; see summary.json)"
    if bad_lines:
        line += f"; {bad_lines} unreadable line(s) of results.jsonl skipped"
    scored = sum(s["scored"] for s in summary["scorers"].values())
    if scored == 0:
        print(f"{line}; no row could be scored", file=sys.stderr)
        return 1
    failed = sum(s["failed"] for s in summary["scorers"].values())
    print(f"{line}; the folder holds {scored:,} scored, {failed:,} failed", file=sys.stderr)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from evalgpu.calibrate import calibrate

    try:
        settings = RunSettings(
            data=tuple(args.data),
            scorers=SCORERS,
            out=args.out,
            limit=args.limit,
            **_judge_settings(args),
        )
    except ValueError as exc:
        return _fail("calibrate", str(exc), 2)
    console = _Console(sys.stderr, args.progress)
    try:
        engine = settings.load_engine()
    except Exception as exc:
        return _fail("calibrate", f"cannot load the judge: {type(exc).__name__}: {exc}", 1)
    try:
        calibration, report = calibrate(
            settings.data,
            settings.out,
            engine,
            name=args.name,
            fit_share=args.fit_share,
            seed=args.seed,
            max_questions=settings.max_questions,
            limit=settings.limit,
            sample=args.sample,
            on_progress=console.progress,
            on_error=console.error,
            on_notice=console.notice,
        )
    except (ValueError, ConfigError) as exc:
        console.finish()
        return _fail("calibrate", str(exc), 2)
    except RuntimeError as exc:  # rows failed in the engine: nothing fitted
        console.finish()
        return _fail("calibrate", str(exc), 1)
    finally:
        console.finish()
    print(_calibration_table(calibration, report))
    print(f"\nwrote {settings.out / 'calibration.json'}, {settings.out / 'report.json'}")
    return 0


def _calibration_table(calibration: Any, report: dict[str, Any]) -> str:
    """Each check's fit, then its held-out metrics: uncalibrated, calibrated, the difference."""
    lines = []
    for check, mapped in calibration.checks.items():
        held = report["checks"][check]
        lines.append(
            f"{check}: threshold {mapped.threshold:.3f}, slope {mapped.slope:.2f} "
            f"(fitted on {mapped.rows} rows; held out: {held['rows']} rows)"
        )
        for metric, m in held.items():
            if isinstance(m, dict):
                ci = m["ci95"]
                interval = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
                lines.append(
                    f"  {metric:<26} {m['uncalibrated']:.3f} -> {m['calibrated']:.3f} "
                    f"({m['difference']:+.3f}{interval})"
                )
    return "\n".join(lines)


def _report(args: argparse.Namespace) -> int:
    from evalgpu.report import write_report

    try:
        text, page, bad = write_report(args.dir)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        return _fail("report", str(exc), 2)
    print(text)
    note = f"; {bad} unreadable line(s) skipped" if bad else ""
    print(f"wrote {page}{note}", file=sys.stderr)
    return 0


def _models(args: argparse.Namespace) -> int:
    from evalgpu import models

    if args.verb == "list":
        presets = models.list_presets()
        default = getattr(models, "DEFAULT_MODEL", None)
        print(f"{'name':<28} {'context':>8}  {'weights':<8} description")
        for p in presets:
            mark = "*" if p.name == default else " "
            there = "present" if p.present else "missing"
            print(f"{p.name + mark:<28} {p.max_model_len:>8,}  {there:<8} {p.description}")
        print(f"\n* the default model. Weights live in {models.models_dir()}/<name>/")
        return 0
    try:
        folder = models.pull(args.name or models.DEFAULT_MODEL)
    except ValueError as exc:
        return _fail("models pull", str(exc), 2)
    except Exception as exc:
        return _fail("models pull", f"{type(exc).__name__}: {exc}", 1)
    print(folder)
    return 0


class _Console:
    """Progress and row errors on stderr: a bar on a terminal, else a line every 10 s."""

    def __init__(self, stream: TextIO, mode: str) -> None:
        self.stream = stream
        if mode == "auto":
            mode = "bar" if stream.isatty() else "lines"
        self.mode = mode
        self.interval = 0.2 if mode == "bar" else 10.0
        self.last = time.monotonic()
        self.drawn = False
        self.errors = 0

    def progress(self, p: Progress, force: bool = False) -> None:
        now = time.monotonic()
        if self.mode == "off" or (not force and now - self.last < self.interval):
            return
        self.last = now
        if self.mode == "bar":
            self.stream.write("\r\x1b[K" + _bar(p))
            self.drawn = True
        else:
            self.stream.write(f"{PROG} run: {_status(p)}\n")
        self.stream.flush()

    def error(self, message: str) -> None:
        self.errors += 1
        if self.errors > ERRORS_SHOWN + 1:
            return
        if self.errors == ERRORS_SHOWN + 1:
            message = "further errors are only in results.jsonl"
        self.notice(message)

    def notice(self, message: str) -> None:
        """A line that is always shown (a file that cannot be read, a repeated id)."""
        self._clear()
        self.stream.write(f"{PROG} run: {message}\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False

    def finish(self) -> None:
        self._clear()
        self.stream.flush()


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rates(p: Progress) -> dict[str, Any]:
    elapsed = max(p.elapsed, 1e-9)
    rate = p.rows_run / elapsed
    eta = None
    if p.rows_total is not None and rate > 0:
        eta = max(0, p.rows_total - p.rows_done) / rate
    return {"rate": rate, "tok": p.output_tokens / elapsed, "eta": eta}


def _per_time(rate: float) -> str:
    """Rows a second, or a minute when under one a second (a CPU judge: 0.05 rows/s)."""
    if rate >= 1 or rate == 0:
        return f"{rate:,.1f} rows/s"
    return f"{rate * 60:.{1 if rate * 60 >= 1 else 2}f} rows/min"


def _status(p: Progress) -> str:
    r = _rates(p)
    total = f"/{p.rows_total:,}" if p.rows_total is not None else ""
    eta = f", ETA {_clock(r['eta'])}" if r["eta"] is not None else ""
    failed = f", {p.failed:,} errors" if p.failed else ""
    flight = ""
    if p.rows_in_flight and (p.calls_in_flight or p.calls):
        planned = p.calls_planned
        of = f"/~{planned:,}" if planned is not None else ""
        flight = f"; now {_n(p.rows_in_flight, 'row')}: {p.calls_in_flight:,}{of} judge calls"
    return (
        f"{p.rows_done:,}{total} rows, {_per_time(r['rate'])}, "
        f"{r['tok']:,.0f} output tok/s{eta}{failed}{flight}"
    )


def _bar(p: Progress, width: int = 24) -> str:
    if p.rows_total:
        share = min(1.0, p.rows_done / p.rows_total)
        filled = int(share * width)
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%} "
    else:
        bar = ""
    return bar + _status(p)
