"""Results tables in the paper's format, as Markdown and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from . import runs
from ._io import atomic_write

COLUMNS = ("Model", "Size", "ln Z-hat", "ln(Z-hat -/+ 3 sigma)", "Avg. test NLL")
MODEL_NAMES = {"rbm": "RBM", "orbm": "oRBM", "irbm": "iRBM"}


def _number(value, digits=2) -> str:
    return f"{value:.{digits}f}" if value == value and abs(value) != float("inf") else str(value)


def run_row(run_dir) -> dict:
    """One evaluated run as table cells (raises if `irbm evaluate` has not been run)."""
    run_dir = Path(run_dir)
    if not (run_dir / runs.EVALUATION_FILE).exists():
        raise FileNotFoundError(f"{run_dir} has no {runs.EVALUATION_FILE}: run "
                                f"`irbm evaluate {run_dir}` first")
    record = runs.read_json(run_dir / runs.EVALUATION_FILE)
    split = "test" if "test" in record["nll"] else next(iter(record["nll"]), None)
    nll = record["nll"].get(split) if split else None
    return {
        "run": str(run_dir), "dataset": record.get("dataset", ""),
        "Model": MODEL_NAMES.get(record["family"], record["family"]),
        "Size": str(record["n_hidden"]),
        "ln Z-hat": _number(record["log_z"]),
        "ln(Z-hat -/+ 3 sigma)": f"[{_number(record['log_z_low'])}, "
                                  f"{_number(record['log_z_high'])}]",
        "Avg. test NLL": (f"{_number(nll['mean'])} +/- {_number(nll['stderr'])}"
                          if nll else "n/a") + ("" if split in ("test", None) else f" ({split})"),
        "record": record,
    }


def markdown_table(rows) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row[c] for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def _embedded_image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'
            f"<figcaption>{html.escape(path.stem.replace('_', ' '))}</figcaption></figure>")


def html_page(rows, run_dirs) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[c])}</td>" for c in COLUMNS)
                   + "</tr>" for row in rows)
    sections = []
    for run_dir, row in zip(run_dirs, rows):
        images = sorted((Path(run_dir) / "figures").glob("*.png"))
        sections.append(f"<h2>{html.escape(row['Model'])} ({html.escape(row['Size'])} units): "
                        f"{html.escape(str(run_dir))}</h2>"
                        + "".join(_embedded_image(p) for p in images))
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #999;padding:4px 10px;text-align:right}"
             "figure{display:inline-block;margin:8px}img{max-width:500px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>irbm report</title>"
            f"<style>{style}</style></head><body><h1>irbm report</h1>"
            f"<p>ln Z estimated by annealed importance sampling; NLL in nats, +/- one standard "
            f"error over the test set (ln Z-hat taken as exact).</p>"
            f"<table><tr>{head}</tr>{body}</table>{''.join(sections)}</body></html>")


def write_report(run_dirs, out_dir=None) -> tuple[Path, Path]:
    """Write report.md and report.html for evaluated runs into ``out_dir`` (default: the runs'
    common parent) and return both paths."""
    run_dirs = [Path(r) for r in run_dirs]
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise FileNotFoundError(f"run directory not found: {run_dir}")
    rows = [run_row(r) for r in run_dirs]
    if out_dir is None:
        out_dir = Path(os.path.commonpath([r.resolve() for r in run_dirs]))
        if len(run_dirs) == 1:
            out_dir = run_dirs[0]
    out_dir = runs.check_writable(out_dir)
    datasets = sorted({row["dataset"] for row in rows})
    markdown = (f"# irbm report\n\nDataset: {', '.join(datasets)}. ln Z by AIS; average NLL "
                f"+/- standard error over the test set.\n\n{markdown_table(rows)}\n")
    markdown_path, html_path = out_dir / "report.md", out_dir / "report.html"
    for path, text in ((markdown_path, markdown), (html_path, html_page(rows, run_dirs))):
        with atomic_write(path, "w") as stream:
            stream.write(text)
    return markdown_path, html_path
