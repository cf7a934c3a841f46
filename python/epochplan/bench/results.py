"""The results file of ``epochplan bench`` (``--results FILE``): one run's
measurements and where they were taken, as JSON, so that tables and plots
are rendered from it later (``--from-results FILE``) instead of being
copied by hand.

The file holds every run of every case (seconds and peak bytes), each case's
group, name, note and whether it is ours, and the run's context: the
command, the machine (processor, CPUs, memory), the epochplan version, the
date, the load averages at the start and end and the time in all. A case is
rendered from what the file says of it, so a file stays readable after the
cases change.

The single-purpose scripts of ``benches/`` write a file of the same context
and their own tables (``--results FILE``; :class:`Tables`): each table a list
of rows, each row a JSON object of the measurements themselves (numbers,
not their Markdown), which ``benches/render_performance.py`` renders into
the performance page.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from epochplan.bench.cases import Case

#: The version of the results file's layout.
FORMAT = 1


@dataclass
class Context:
    """Where and how a benchmark run was taken."""

    command: str
    machine: str
    epochplan: str
    date: str
    load_start: list[float]
    load_end: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: The user's job the run timed (``--world-size`` ...), if any.
    job: str = ""

    def describe(self) -> str:
        """One line for the foot of a table."""
        load = " ".join(f"{x:.2f}" for x in self.load_end)
        job = f" for {self.job}" if self.job else ""
        return (
            f"{self.machine}; `{self.command}`{job}; epochplan {self.epochplan}, {self.date}; "
            f"{self.seconds:.0f} s in all; load average {load} at the end"
        )


def machine() -> str:
    """The processor, the CPUs this process may use and the memory."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        mem = f", {memory / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    return f"{cpu}, {cpus} CPUs{mem}"


def start(argv: list[str], program: tuple[str, ...] = ("epochplan",)) -> Context:
    """The context of a run that starts now with the command line ``argv``
    (the arguments after ``program``)."""
    from epochplan import __version__

    return Context(
        command=shlex.join([*program, *argv]),
        machine=machine(),
        epochplan=__version__,
        date=time.strftime("%Y-%m-%d", time.gmtime()),
        load_start=[round(x, 2) for x in os.getloadavg()],
    )


def save(path: Path, context: Context, results: list[Any]) -> None:
    """Writes ``results`` (bench Results) and ``context`` to ``path`` (whole
    or not at all)."""
    from epochplan.bench import replace_with

    doc: dict[str, Any] = {
        "format": FORMAT,
        "context": asdict(context),
        "results": [
            {
                "group": r.case.group,
                "name": r.case.name,
                "note": r.case.note,
                "ours": r.case.ours,
                "n": r.n,
                "seconds": r.seconds,
                "peaks": r.peaks,
                "skip": r.skip,
            }
            for r in results
        ],
    }
    # One line a result: the file reads as a table and diffs by row.
    rows = ",\n  ".join(json.dumps(r) for r in doc.pop("results"))
    head = json.dumps(doc, indent=1)[:-2]
    text = f'{head},\n "results": [\n  {rows}\n ]\n}}\n'
    replace_with(path, "--results", lambda tmp: tmp.write_text(text))


def load(path: Path) -> tuple[Context, list[Any]]:
    """The context and the Results of a results file; ValueError naming
    the file when it is not one."""
    from epochplan.bench import Result

    try:
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
        context = Context(**doc["context"])
        results = []
        for row in doc["results"]:
            case = Case(row["group"], row["name"], bool(row["ours"]), "", "", 0, note=row["note"])
            res = Result(case, int(row["n"]), [float(s) for s in row["seconds"]])
            res.peaks = [int(p) for p in row["peaks"]]
            res.skip = str(row["skip"])
            if not res.skip and not (res.seconds and res.peaks):
                raise ValueError(f"{case.name} at N={res.n}: no measurement and no skip")
            results.append(res)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--from-results {path}: cannot read ({e})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--from-results {path}: not a results file ({e!r})") from None
    return context, results


def finish(context: Context, started: float) -> None:
    """Notes the end of the run ``context`` that started at ``started``
    (``time.perf_counter()``): its time in all and the load averages now."""
    context.seconds = round(time.perf_counter() - started, 1)
    context.load_end = [round(x, 2) for x in os.getloadavg()]


class Tables:
    """The results file of a benchmark script (``--results FILE``): the
    script's name, the run's context, its parameters and its tables, each a
    list of rows (JSON objects of plain values).

    ``Tables(path, __file__, sys.argv[1:])`` before the run (it checks that
    ``path`` can be written, so that a bad path fails before the
    measurements, not after), ``add(table, row)`` for each row, ``save()``
    at the end; with ``path`` None nothing is written.
    """

    def __init__(self, path: Path | None, script: str, argv: list[str]) -> None:
        from epochplan.bench import check_writable

        if path is not None:
            check_writable("--results", Path(path))
        self.path = None if path is None else Path(path)
        self.script = Path(script).name
        self.context = start(argv, program=("python", f"benches/{self.script}"))
        self.parameters: dict[str, Any] = {}
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self._started = time.perf_counter()

    def add(self, table: str, row: dict[str, Any]) -> None:
        """Appends ``row`` to ``table`` (created on its first row)."""
        self.tables.setdefault(table, []).append(row)

    def save(self) -> None:
        """Notes the end of the run and writes the file (whole or not at
        all), if there is one."""
        finish(self.context, self._started)
        if self.path is None:
            return
        from epochplan.bench import replace_with

        head = json.dumps(
            {
                "format": FORMAT,
                "script": self.script,
                "context": asdict(self.context),
                "parameters": self.parameters,
            },
            indent=1,
            default=_plain,
        )[:-2]
        # One line a row: the file reads as a table and diffs by row.
        tables = ",\n".join(
            f"  {json.dumps(name)}: [\n"
            + ",\n".join(f"   {json.dumps(r, default=_plain)}" for r in rows)
            + "\n  ]"
            for name, rows in self.tables.items()
        )
        text = f'{head},\n "tables": {{\n{tables}\n }}\n}}\n'
        replace_with(self.path, "--results", lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, path: Path) -> Tables:
        """The results file of a script; ValueError naming the file when it
        is not one."""
        try:
            doc = json.loads(Path(path).read_text())
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
            out = cls.__new__(cls)
            out.path = Path(path)
            out.script = str(doc["script"])
            out.context = Context(**doc["context"])
            out.parameters = dict(doc["parameters"])
            out.tables = {str(k): [dict(r) for r in rows] for k, rows in doc["tables"].items()}
            out._started = 0.0
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: cannot read ({e})") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a results file of a benchmark script ({e!r})") from None
        return out


def _plain(value: Any) -> Any:
    """A numpy scalar or array as the Python value JSON writes."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
