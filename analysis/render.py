"""Small Markdown, LaTeX (booktabs) and HTML renderers for tables of strings, with optional bold cells."""
from __future__ import annotations

import html as _html

import pandas as pd

from trainables.timestamps import duration  # noqa: F401  (the report prints the estimate's wall times)

_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "λ": r"$\lambda$",
    "σ": r"$\sigma$",
    "–": "--",
}


def _bold(cells: pd.DataFrame, bold: pd.DataFrame | None) -> list[list[bool]]:
    if bold is None:
        return [[False] * cells.shape[1] for _ in range(cells.shape[0])]
    return bold.reindex(index=cells.index, columns=cells.columns, fill_value=False).astype(bool).values.tolist()


def markdown(cells: pd.DataFrame, bold: pd.DataFrame | None = None) -> str:
    """A pipe table; the first column is left-aligned, the rest right-aligned; bold cells as **x**."""
    header = [str(c).replace("|", r"\|") for c in cells.columns]
    body = [
        [f"**{v}**" if b else v for v, b in zip((str(v).replace("|", r"\|") for v in row), flags)]
        for row, flags in zip(cells.values.tolist(), _bold(cells, bold))
    ]
    widths = [max(3, *(len(r[j]) for r in [header, *body])) for j in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(row, widths))) + " |"

    rule = "| " + " | ".join(":" + "-" * (w - 1) if j == 0 else "-" * (w - 1) + ":" for j, w in enumerate(widths)) + " |"
    return "\n".join([line(header), rule, *(line(r) for r in body)]) + "\n"


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in text)


def latex(cells: pd.DataFrame, bold: pd.DataFrame | None = None) -> str:
    """A booktabs tabular; bold cells as \\textbf{x}."""
    def line(row: list[str]) -> str:
        return " & ".join(row) + r" \\"

    header = [latex_escape(str(c)) for c in cells.columns]
    body = [
        [rf"\textbf{{{latex_escape(str(v))}}}" if b else latex_escape(str(v)) for v, b in zip(row, flags)]
        for row, flags in zip(cells.values.tolist(), _bold(cells, bold))
    ]
    spec = "l" + "r" * (cells.shape[1] - 1)
    return "\n".join(
        [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", line(header), r"\midrule", *map(line, body), r"\bottomrule",
         r"\end{tabular}"]
    ) + "\n"


def html(cells: pd.DataFrame, bold: pd.DataFrame | None = None) -> str:
    """An HTML table; bold cells as <strong>."""
    head = "".join(f"<th>{_html.escape(str(c))}</th>" for c in cells.columns)
    rows = [
        "<tr>" + "".join(
            f"<td><strong>{_html.escape(str(v))}</strong></td>" if b else f"<td>{_html.escape(str(v))}</td>"
            for v, b in zip(row, flags)
        ) + "</tr>"
        for row, flags in zip(cells.values.tolist(), _bold(cells, bold))
    ]
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n"
